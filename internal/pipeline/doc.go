// Package pipeline reads the DAG documents users deploy: it parses them (YAML or JSON), applies
// defaults, validates every field with its path, and parses source schedules.
//
// A document is decoded into a generic tree first, so that an unknown key or a value of the wrong
// type is reported with its path instead of being dropped by a typed decoder. The walk collects
// every problem (never only the first) in a fixed order, each with the path of its field, such as
// jobs[2].inputs[0].from.job, and the line of the user's file where it is known. Only a document
// without problems is turned into a Document.
//
// The package is pure: no store, no network, and no clock except the times passed to
// Schedule.Next. What it cannot know, the datasets of other DAGs, it leaves to the caller:
// Document.ExternalDatasets lists them and Document.CheckExternal checks the inputs that read
// them against allowlists the caller looks up.
package pipeline
