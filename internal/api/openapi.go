package api

import _ "embed"

// openAPI is the OpenAPI 3.1 description of the producer API, served at /openapi.json.
//
//go:embed openapi.json
var openAPI []byte
