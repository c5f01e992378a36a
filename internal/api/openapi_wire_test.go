package api_test

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/baton-dev/baton/wire"
)

// The shared wire types (package wire) are what workers and sinks receive, and the SDKs' types
// are generated from the document's schemas: each schema below has exactly the members its Go
// type encodes, so neither the document nor an SDK generated from it can drift from the server.
func TestOpenAPISchemasMatchTheWireTypes(t *testing.T) {
	doc, _ := fetchOpenAPI(t, openAPIServer())
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for _, c := range []struct {
		schema string
		value  any
	}{
		{"StreamClaim", wire.StreamClaim{}},
		{"WorkerTask", wire.Task{}},
		{"WorkerTaskJob", wire.TaskJob{}},
		{"TaskEnvelope", wire.PushEnvelope{}},
		{"PipelineTaskInput", wire.DatasetInput{}},
		{"PipelineTaskOutput", wire.DatasetOutput{}},
		{"PipelineTaskJob", wire.PipelineJob{}},
		{"BundleRef", wire.Bundle{}},
		{"SinkClaimRequest", wire.SinkClaimRequest{}},
		{"SinkClaim", wire.SinkClaim{}},
		{"SinkMessage", wire.SinkMessage{}},
		{"SinkDataset", wire.SinkDataset{}},
	} {
		schema, ok := schemas[c.schema].(map[string]any)
		if !ok {
			t.Errorf("the document has no schema %s", c.schema)
			continue
		}
		props, _ := schema["properties"].(map[string]any)
		var documented []string
		for name := range props {
			documented = append(documented, name)
		}
		sort.Strings(documented)
		encoded := jsonMembers(reflect.TypeOf(c.value))
		if strings.Join(documented, ",") != strings.Join(encoded, ",") {
			t.Errorf("schema %s documents %v; %T encodes %v", c.schema, documented, c.value, encoded)
		}
	}
}

// jsonMembers lists the JSON member names a struct type encodes, embedded structs included.
func jsonMembers(typ reflect.Type) []string {
	var names []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			names = append(names, jsonMembers(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
