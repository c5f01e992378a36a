package api

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3.1 description of every endpoint of both listeners, served at
// /openapi.json.
//
//go:embed openapi.json
var openAPI []byte

// GET /openapi.json
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}
