package api_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/api"
	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/pushsig"
	"github.com/baton-dev/baton/internal/store/storetest"
)

// openAPIMethods are the operation keys of an OpenAPI path item.
var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// openAPIServer is a server for listing routes and serving /openapi.json; neither touches the
// dispatcher or the authenticator, so it has none.
func openAPIServer() *api.Server {
	return api.New(api.Config{Logger: slog.New(slog.DiscardHandler)})
}

// fetchOpenAPI gets /openapi.json from the producer handler and decodes it.
func fetchOpenAPI(t *testing.T, s *api.Server) (map[string]any, *httptest.ResponseRecorder) {
	t.Helper()
	rec := httptest.NewRecorder()
	s.ProducerHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi.json", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /openapi.json = %d: %s", rec.Code, rec.Body)
	}
	var doc map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatalf("GET /openapi.json is not a JSON object: %v", err)
	}
	return doc, rec
}

// openAPIOperation is one method of one path of the document.
type openAPIOperation struct {
	key  string // "GET /jobs/{jobId}"
	path string
	item map[string]any // the path item
	op   map[string]any
}

func openAPIOperations(t *testing.T, doc map[string]any) []openAPIOperation {
	t.Helper()
	paths, ok := doc["paths"].(map[string]any)
	if !ok {
		t.Fatal("the document has no paths object")
	}
	var ops []openAPIOperation
	for path, v := range paths {
		item, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("paths[%q] is not an object", path)
		}
		for _, m := range openAPIMethods {
			if raw, ok := item[m]; ok {
				op, ok := raw.(map[string]any)
				if !ok {
					t.Fatalf("paths[%q].%s is not an object", path, m)
				}
				ops = append(ops, openAPIOperation{key: strings.ToUpper(m) + " " + path, path: path, item: item, op: op})
			}
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].key < ops[j].key })
	return ops
}

// openAPIDashboard are the dashboard's mounts: registered on the public listener by the server
// itself when it has a dashboard, outside the route table, with the dashboard's own sign-in.
var openAPIDashboard = []string{"GET /", "GET /ui/"}

// openAPIListener is the x-baton-listener of a server object: which listener it is.
const openAPIListener = "x-baton-listener"

// openAPIRouteKey is a route's operation key in the document: a trailing wildcard ({path...}) is
// a plain template variable in OpenAPI.
func openAPIRouteKey(method, pattern string) string {
	return method + " " + strings.ReplaceAll(pattern, "...}", "}")
}

// openAPIListeners are the listeners an operation is documented on: its path item's servers, or
// the document's.
func openAPIListeners(t *testing.T, doc map[string]any, op openAPIOperation) []api.Listener {
	t.Helper()
	servers, ok := op.item["servers"].([]any)
	if !ok {
		servers, _ = doc["servers"].([]any)
	}
	var out []api.Listener
	for _, sv := range servers {
		m, _ := sv.(map[string]any)
		switch l := api.Listener(fmt.Sprint(m[openAPIListener])); l {
		case api.PublicListener, api.InternalListener:
			if !slices.Contains(out, l) {
				out = append(out, l)
			}
		default:
			t.Errorf("%s: server %v has no %s (public or internal)", op.key, m["url"], openAPIListener)
		}
	}
	slices.Sort(out)
	return out
}

// openAPISchemeAuth is the route credential a security scheme stands for, or "".
func openAPISchemeAuth(doc map[string]any, name string) api.Auth {
	scheme, _ := lookupJSONPointer(doc, "#/components/securitySchemes/"+escapeJSONPointer(name))
	m, _ := scheme.(map[string]any)
	switch {
	case m["type"] == "apiKey" && m["in"] == "header" && m["name"] == "x-api-key":
		return api.AuthAPIKey
	case m["type"] == "apiKey" && m["in"] == "header" && m["name"] == "X-Trace-Task-Capability":
		return api.AuthCapabilityToken
	case m["type"] == "http" && m["scheme"] == "bearer" && name != "PushSecret":
		return api.AuthCallbackToken
	case m["type"] == "mutualTLS":
		return api.AuthMTLS
	}
	return ""
}

// openAPISecurity is what an operation's security (its own, or the document's) accepts: each
// requirement as the credentials its schemes stand for; an empty requirement ({}, or security: [])
// accepts a request without any, and is AuthNone.
func openAPISecurity(t *testing.T, doc map[string]any, op openAPIOperation) [][]api.Auth {
	t.Helper()
	sec, ok := op.op["security"].([]any)
	if !ok {
		sec, _ = doc["security"].([]any)
	}
	if len(sec) == 0 {
		return [][]api.Auth{{api.AuthNone}}
	}
	var out [][]api.Auth
	for _, req := range sec {
		m, _ := req.(map[string]any)
		if len(m) == 0 {
			out = append(out, []api.Auth{api.AuthNone})
			continue
		}
		var auths []api.Auth
		for name := range m {
			a := openAPISchemeAuth(doc, name)
			if a == "" {
				t.Errorf("%s: security scheme %q stands for no credential of the route table", op.key, name)
			}
			auths = append(auths, a)
		}
		out = append(out, auths)
	}
	return out
}

// openAPIServed reports whether h serves method path with a handler of its own rather than its
// catch-all (a 404 "no such endpoint" or a 405), and what it answered. The request needs no
// credential and no dispatcher call: a body that is not a JSON object is refused before a worker
// endpoint asks the dispatcher, and a route behind a credential refuses the missing one.
func openAPIServed(h http.Handler, method, path string) (bool, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader("[]")))
	answer := fmt.Sprintf("%d %s", rec.Code, strings.TrimSpace(rec.Body.String()))
	var body struct{ Error string }
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	switch {
	case rec.Code == http.StatusMethodNotAllowed:
		return false, answer
	case rec.Code == http.StatusNotFound && strings.HasPrefix(body.Error, "no such endpoint: "):
		return false, answer
	}
	return true, answer
}

// Every route of both listeners (and the dashboard's mounts) is documented, on its listener and
// with the security scheme of its credential; every documented operation is served, on exactly
// the listeners it names.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	s := openAPIServer()
	doc, _ := fetchOpenAPI(t, s)

	// What the server registers: by operation key, each listener's credential.
	type served struct {
		listener api.Listener
		auth     api.Auth
	}
	registered := map[string][]served{}
	for _, rt := range s.Routes() {
		key := openAPIRouteKey(rt.Method, rt.Pattern)
		registered[key] = append(registered[key], served{rt.Listener, rt.Auth})
	}
	for _, l := range []api.Listener{api.PublicListener, api.InternalListener} {
		n := 0
		for _, rs := range registered {
			for _, r := range rs {
				if r.listener == l {
					n++
				}
			}
		}
		if n == 0 {
			t.Fatalf("the route table lists no route of the %s listener", l)
		}
	}
	for _, key := range openAPIDashboard {
		if registered[key] != nil {
			t.Fatalf("%s is in the route table: drop it from openAPIDashboard", key)
		}
		registered[key] = []served{{api.PublicListener, api.AuthNone}}
	}

	documented := map[string]openAPIOperation{}
	for _, op := range openAPIOperations(t, doc) {
		documented[op.key] = op
	}

	for key, routes := range registered {
		op, ok := documented[key]
		if !ok {
			t.Errorf("route %s is registered but not documented", key)
			continue
		}
		var want []api.Listener
		for _, r := range routes {
			want = append(want, r.listener)
		}
		slices.Sort(want)
		if got := openAPIListeners(t, doc, op); !slices.Equal(got, want) {
			t.Errorf("%s is documented on the listeners %v, served on %v", key, got, want)
		}
		security := openAPISecurity(t, doc, op)
		for _, r := range routes {
			// Some requirement must stand for the route's credential (AuthNone: the empty one).
			if !slices.ContainsFunc(security, func(req []api.Auth) bool { return slices.Contains(req, r.auth) }) {
				t.Errorf("%s on the %s listener needs %s, but its documented security %v does not name it", key, r.listener, r.auth, security)
			}
		}
		for _, req := range security {
			// And no requirement may stand for a credential no listener asks for.
			if !slices.ContainsFunc(routes, func(r served) bool { return slices.Contains(req, r.auth) }) {
				t.Errorf("%s: documented security requirement %v is not a credential the server asks for (%v)", key, req, routes)
			}
		}
		if slices.ContainsFunc(routes, func(r served) bool { return r.auth == api.AuthAPIKey }) {
			if _, ok := op.op["responses"].(map[string]any)["401"]; !ok {
				t.Errorf("%s does not document the 401 of a missing or invalid key", key)
			}
		}
	}

	// Every documented operation is served by the listeners it names, and only by them.
	st := storetest.OpenSQLite(t)
	quiet := slog.New(slog.DiscardHandler)
	d, err := dispatch.New(st, dispatch.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	dashboard := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	full := api.New(api.Config{Dispatcher: d, DataPlane: dataplane.New(d, dataplane.Config{}), Auth: auth.NewAuthenticator(st, auth.Limits{}, nil), Logger: quiet, Dashboard: dashboard})
	handlers := map[api.Listener]http.Handler{api.PublicListener: full.ProducerHandler(), api.InternalListener: full.InternalHandler()}
	for key, op := range documented {
		if registered[key] == nil {
			t.Errorf("%s is documented but the server registers no such route", key)
			continue
		}
		method, path, _ := strings.Cut(key, " ")
		path = openAPITemplateVar.ReplaceAllString(path, "x")
		names := openAPIListeners(t, doc, op)
		for l, h := range handlers {
			ok, answer := openAPIServed(h, method, path)
			switch named := slices.Contains(names, l); {
			case named && !ok:
				t.Errorf("%s is documented on the %s listener but not served there: %s", key, l, answer)
			case !named && ok:
				t.Errorf("%s is served on the %s listener, which its documentation does not name: %s", key, l, answer)
			}
		}
	}

	security, _ := doc["security"].([]any)
	if len(security) != 1 {
		t.Fatalf("global security = %v, want the API key scheme", doc["security"])
	}
	for name := range security[0].(map[string]any) {
		if openAPISchemeAuth(doc, name) != api.AuthAPIKey {
			t.Errorf("the global security scheme %s is not an apiKey in header x-api-key", name)
		}
	}
}

var (
	openAPITemplateVar = regexp.MustCompile(`\{([^{}]+)\}`)
	openAPIStatusCode  = regexp.MustCompile(`^[1-5][0-9][0-9]$`)
)

func TestOpenAPIDocumentIsWellFormed(t *testing.T) {
	doc, rec := fetchOpenAPI(t, openAPIServer())
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	if doc["openapi"] != "3.1.0" {
		t.Errorf("openapi = %v, want 3.1.0", doc["openapi"])
	}
	info, _ := doc["info"].(map[string]any)
	if info["title"] == nil || info["version"] == nil {
		t.Errorf("info = %v, want a title and a version", info)
	}

	ids := map[string]string{}
	for _, op := range openAPIOperations(t, doc) {
		id, _ := op.op["operationId"].(string)
		switch {
		case id == "":
			t.Errorf("%s has no operationId", op.key)
		case ids[id] != "":
			t.Errorf("operationId %q is used by %s and %s", id, ids[id], op.key)
		default:
			ids[id] = op.key
		}

		responses, _ := op.op["responses"].(map[string]any)
		if len(responses) == 0 {
			t.Errorf("%s has no responses", op.key)
		}
		for code := range responses {
			if code != "default" && !openAPIStatusCode.MatchString(code) {
				t.Errorf("%s: response key %q is not a status code", op.key, code)
			}
		}

		// Every template variable of the path is a required path parameter, and every path
		// parameter is a template variable.
		declared := map[string]bool{}
		for _, list := range []any{op.item["parameters"], op.op["parameters"]} {
			params, _ := list.([]any)
			for _, p := range params {
				p = resolveRef(t, doc, p)
				m, _ := p.(map[string]any)
				if m["in"] != "path" {
					continue
				}
				name, _ := m["name"].(string)
				if m["required"] != true {
					t.Errorf("%s: path parameter %q must be required", op.key, name)
				}
				declared[name] = true
			}
		}
		vars := map[string]bool{}
		for _, match := range openAPITemplateVar.FindAllStringSubmatch(op.path, -1) {
			vars[match[1]] = true
			if !declared[match[1]] {
				t.Errorf("%s: template variable {%s} has no path parameter", op.key, match[1])
			}
		}
		for name := range declared {
			if !vars[name] {
				t.Errorf("%s: path parameter %q is not in the path", op.key, name)
			}
		}
	}

	// Every $ref points inside the document and resolves.
	n := 0
	walkRefs(doc, "#", func(where string, ref string) {
		n++
		if !strings.HasPrefix(ref, "#/") {
			t.Errorf("%s: $ref %q does not point inside the document", where, ref)
			return
		}
		if _, ok := lookupJSONPointer(doc, ref); !ok {
			t.Errorf("%s: $ref %q does not resolve", where, ref)
		}
	})
	if n == 0 {
		t.Error("the document has no $ref; shared shapes belong in components")
	}
}

// walkRefs calls fn with every $ref string in v and the location of the object holding it.
func walkRefs(v any, where string, fn func(where, ref string)) {
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok {
			fn(where, ref)
		}
		for k, c := range x {
			walkRefs(c, where+"/"+escapeJSONPointer(k), fn)
		}
	case []any:
		for i, c := range x {
			walkRefs(c, where+"/"+strconv.Itoa(i), fn)
		}
	}
}

func escapeJSONPointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// lookupJSONPointer resolves a local JSON pointer reference ("#/a/b~1c").
func lookupJSONPointer(doc any, ref string) (any, bool) {
	if ref == "#" {
		return doc, true
	}
	if !strings.HasPrefix(ref, "#/") {
		return nil, false
	}
	cur := doc
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := cur.(type) {
		case map[string]any:
			v, ok := x[tok]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			cur = x[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// resolveRef follows $ref chains of an object (a parameter, a response); nil if one does not resolve.
func resolveRef(t *testing.T, doc, v any) any {
	t.Helper()
	for range 10 {
		m, ok := v.(map[string]any)
		if !ok {
			return v
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return v
		}
		if v, ok = lookupJSONPointer(doc, ref); !ok {
			return nil // reported by the walk over every $ref
		}
	}
	t.Error("$ref chain too long")
	return nil
}

// envelopePipelineKeys are the members only a pipeline task's envelope carries (its data plane).
var envelopePipelineKeys = []string{"job", "operator", "config", "inputs", "outputs", "trigger"}

// envelopeOptionalKeys are the members an envelope carries only when it has them: its job's
// traceparent.
var envelopeOptionalKeys = []string{"traceparent"}

// The push delivery is documented as a webhook: the envelope's members and the authentication
// headers are the ones the pusher sends; the members of every envelope are required, a pipeline
// task's own members optional.
func TestOpenAPIDocumentsThePushDelivery(t *testing.T) {
	doc, _ := fetchOpenAPI(t, openAPIServer())
	op, ok := lookupJSONPointer(doc, "#/webhooks/pushTask/post")
	if !ok {
		t.Fatal("no webhook pushTask")
	}
	post := op.(map[string]any)

	headers := map[string]bool{}
	params, _ := post["parameters"].([]any)
	for _, p := range params {
		m, _ := resolveRef(t, doc, p).(map[string]any)
		if m["in"] == "header" {
			headers[m["name"].(string)] = true
		}
	}
	for _, h := range []string{pushsig.TimestampHeader, pushsig.SignatureHeader, "Idempotency-Key"} {
		if !headers[h] {
			t.Errorf("the push delivery does not document header %s", h)
		}
	}
	var bearer bool
	security, _ := post["security"].([]any)
	for _, req := range security {
		for name := range req.(map[string]any) {
			scheme, _ := lookupJSONPointer(doc, "#/components/securitySchemes/"+name)
			m, _ := scheme.(map[string]any)
			bearer = bearer || (m["type"] == "http" && m["scheme"] == "bearer")
		}
	}
	if !bearer {
		t.Errorf("the push delivery's security %v names no bearer scheme", security)
	}

	schema, ok := lookupJSONPointer(doc, "#/webhooks/pushTask/post/requestBody/content/application~1json/schema")
	if !ok {
		t.Fatal("the push delivery has no JSON body")
	}
	env, _ := resolveRef(t, doc, schema).(map[string]any)
	props, _ := env["properties"].(map[string]any)
	required, _ := env["required"].([]any)
	var documented, mandatory []string
	for k := range props {
		documented = append(documented, k)
	}
	for _, k := range required {
		mandatory = append(mandatory, k.(string))
	}
	want := slices.Sorted(slices.Values(envelopeKeys))
	all := slices.Sorted(slices.Values(slices.Concat(envelopeKeys, envelopePipelineKeys, envelopeOptionalKeys)))
	slices.Sort(documented)
	slices.Sort(mandatory)
	if !slices.Equal(documented, all) || !slices.Equal(mandatory, want) {
		t.Errorf("TaskEnvelope documents %v (required %v), the pusher sends %v (and %v for a pipeline task)",
			documented, mandatory, want, envelopePipelineKeys)
	}
}

// A server built without a token store (api.Config.Tokens) cannot check a task token: every
// token-authenticated route answers 503, whatever token the request carries, instead of verifying
// against nothing.
func TestTokenRoutesWithoutATokenStoreAnswer503(t *testing.T) {
	s := openAPIServer()
	n := 0
	for _, rt := range s.Routes() {
		if rt.Auth != api.AuthCapabilityToken && rt.Auth != api.AuthCallbackToken {
			continue
		}
		n++
		path := strings.ReplaceAll(rt.Pattern, "{task_id}", "01a20ce9-1424-74fc-8c9a-c8f8156bcd91")
		req := httptest.NewRequest(rt.Method, path, strings.NewReader(`{"task_id":"01a20ce9-1424-74fc-8c9a-c8f8156bcd91","attempt":1,"lease_token":"x"}`))
		req.Header.Set("X-Trace-Task-Capability", "eyJhbGciOiJIUzI1NiJ9.e30.x")
		req.Header.Set("Authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.e30.x")
		rec := httptest.NewRecorder()
		s.ProducerHandler().ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "without task tokens") {
			t.Errorf("%s %s without a token store = %d %s, want 503", rt.Method, path, rec.Code, rec.Body)
		}
	}
	if n == 0 {
		t.Fatal("the route table has no token-authenticated route")
	}
}
