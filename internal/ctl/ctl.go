// Package ctl is Baton's command-line client of the producer API: the job, pipeline, dataset and
// query commands of `baton`, which print the API's objects as tables, JSON or YAML (a query's
// rows as a table, JSON or CSV).
package ctl

import (
	"io"
	"os"

	"github.com/baton-dev/baton/internal/cmdline"
)

// DefaultURL is the server the commands speak to when neither --url nor BATON_URL names one.
const DefaultURL = "http://127.0.0.1:8080"

// Version is the version the commands send in their User-Agent (baton-cli/VERSION); cmd/baton
// sets it to its own.
var Version = "dev"

// Stdin is what "submit -f -", "deploy -f -" and "query -" read; tests replace it.
var Stdin io.Reader = os.Stdin

// JobCommands is the sorted subcommands of `baton job`.
func JobCommands() []string { return cmdline.GroupNames(jobCommands) }

// PipelineCommands is the sorted subcommands of `baton pipeline`.
func PipelineCommands() []string { return cmdline.GroupNames(pipelineCommands) }

// DatasetCommands is the sorted subcommands of `baton dataset`.
func DatasetCommands() []string { return cmdline.GroupNames(datasetCommands) }
