package request_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/baton-dev/baton/internal/request"
)

// wantError fails unless err is a *request.Error of status whose "error" is text.
func wantError(t *testing.T, what string, err error, status int, text string) {
	t.Helper()
	var e *request.Error
	if !errors.As(err, &e) || e.Status != status || e.Body["error"] != text {
		t.Errorf("%s: %v, want %d %q", what, err, status, text)
	}
}

func TestWriteJSON(t *testing.T) {
	rec := httptest.NewRecorder()
	request.WriteJSON(rec, http.StatusTeapot, map[string]any{"error": "<a & b>"})
	if rec.Code != http.StatusTeapot || rec.Header().Get("Content-Type") != "application/json" || rec.Body.String() != `{"error":"<a & b>"}`+"\n" {
		t.Fatalf("%d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	e := request.Errorf(http.StatusNotFound, "no %s", "job")
	if e.Error() != "404 no job" || e.Body["error"] != "no job" {
		t.Fatalf("%v %v", e, e.Body)
	}
}

func post(body string) *http.Request {
	return httptest.NewRequest("POST", "/", strings.NewReader(body))
}

func TestReadBody(t *testing.T) {
	for body, want := range map[string]string{
		"{\"a\":\"\xff\"}":     "request body must be valid UTF-8",
		`{"a":"\u0000"}`:       `request body must not contain \u0000 (a NUL character) in a string`,
		`{"a":"\ud800 alone"}`: `request body has an unpaired UTF-16 surrogate escape (\ud800)`,
		`{"a":"\ude00"}`:       `request body has an unpaired UTF-16 surrogate escape (\ude00)`,
		`{"a":"x\\\u0000"}`:    `request body must not contain \u0000 (a NUL character) in a string`,
		`{"a":"\ud83d\u0041"}`: `request body has an unpaired UTF-16 surrogate escape (\ud83d)`,
	} {
		_, err := request.ReadBody(post(body))
		wantError(t, body, err, http.StatusBadRequest, want)
	}
	for _, body := range []string{`{"a":"\\u0000 is text"}`, `{"a":"\ud83d\ude00"}`, `{"a":"caf\u00e9"}`, ``} {
		if b, err := request.ReadBody(post(body)); err != nil || string(b) != body {
			t.Errorf("%s: %q %v", body, b, err)
		}
	}
	// A body over the cap is the reader's error, for the caller to answer.
	r := post(`{"a":"12345678"}`)
	r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, 4)
	var tooLarge *http.MaxBytesError
	if _, err := request.ReadBody(r); !errors.As(err, &tooLarge) {
		t.Errorf("over the cap: %v", err)
	}
}

func TestDecodeObject(t *testing.T) {
	for body, want := range map[string]string{
		``:           "request body is empty: send a JSON object",
		"  \n":       "request body is empty: send a JSON object",
		`null`:       "request body must be a JSON object, not null",
		`[]`:         "request body must be a JSON object, not array",
		`"x"`:        "request body must be a JSON object, not string",
		`{"a":1} {}`: "malformed JSON: unexpected data after the top-level object",
		`{"a":1,}`:   "malformed JSON at byte 8: invalid character '}' looking for beginning of object key string",
		`{"a":`:      "malformed JSON: unexpected end of input",
	} {
		_, err := request.DecodeObject([]byte(body))
		wantError(t, fmt.Sprintf("%q", body), err, http.StatusBadRequest, want)
	}
	obj, err := request.DecodeObject([]byte(` {"n": 12345678901234567890, "s": "x", "z": null} `))
	if err != nil || string(obj["n"]) != "12345678901234567890" || !request.IsNull(obj["z"]) || request.IsNull(obj["s"]) {
		t.Fatalf("%q %v", obj, err)
	}
	if obj, err := request.ReadObject(post(`{"a": [1, 2]}`)); err != nil || string(request.Compact(obj["a"])) != "[1,2]" {
		t.Fatalf("%q %v", obj, err)
	}
	if got := request.Compact(json.RawMessage(`{bad`)); string(got) != `{bad` {
		t.Fatalf("compact of invalid JSON: %q", got)
	}
}

func TestNoBody(t *testing.T) {
	for _, body := range []string{"", " ", "{}", "null", " { } "} {
		if err := request.NoBody(post(body)); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
	for _, body := range []string{`{"a":1}`, "[]", "x"} {
		wantError(t, body, request.NoBody(post(body)), http.StatusBadRequest, "this endpoint takes no request body (send nothing, {} or null)")
	}
}

func TestFields(t *testing.T) {
	obj, err := request.DecodeObject([]byte(`{"s":"x","n":7,"big":4294967296,"b":true,"null":null,"empty":""}`))
	if err != nil {
		t.Fatal(err)
	}
	f := request.Fields{Obj: obj, Where: "body"}
	if f.Str("s") != "x" || *f.Int("n") != 7 || *f.Int64("big") != 4294967296 || !*f.Bool("b") || f.Str("null") != "" ||
		f.Int("null") != nil || f.Bool("missing") != nil || f.Required("s") != "x" || f.Err != nil {
		t.Fatalf("reads: %v", f.Err)
	}
	for _, c := range []struct {
		read func(f *request.Fields)
		want string
	}{
		{func(f *request.Fields) { f.Str("n") }, "body.n must be a string"},
		{func(f *request.Fields) { f.Int64("s") }, "body.s must be an integer"},
		{func(f *request.Fields) { f.Int("big") }, "body.big must be an integer in the 32-bit range"},
		{func(f *request.Fields) { f.Bool("s") }, "body.s must be true or false"},
		{func(f *request.Fields) { f.Required("empty") }, "body.empty is required: a non-empty string"},
		{func(f *request.Fields) { f.Required("missing") }, "body.missing is required: a non-empty string"},
		{func(f *request.Fields) { f.Str("n"); f.Int("s") }, "body.n must be a string"}, // the first error stays
	} {
		f := request.Fields{Obj: obj, Where: "body"}
		c.read(&f)
		wantError(t, c.want, f.Err, http.StatusBadRequest, c.want)
	}
}

func TestBadBytes(t *testing.T) {
	for target, want := range map[string]string{
		"/jobs":                    "",
		"/jobs?status=ok&x=%C3%A9": "",
		"/jobs/%00":                "the request path must be valid UTF-8 without NUL or control characters",
		"/jobs/%FF":                "the request path must be valid UTF-8 without NUL or control characters",
		"/jobs?x=%ZZ":              `malformed query string: invalid URL escape "%ZZ"`,
		"/jobs?x%00=1":             "query parameter names must be valid UTF-8 without NUL or control characters",
		"/jobs?x=a%ED%A0%80":       `query parameter "x" must be valid UTF-8 without NUL or control characters`,
	} {
		if got := request.BadBytes(httptest.NewRequest("GET", target, nil)); got != want {
			t.Errorf("%s: %q, want %q", target, got, want)
		}
	}
	r := httptest.NewRequest("GET", "/jobs", nil)
	r.Header.Set("X-Api-Key", "k\xc0\xaf")
	if got := request.BadBytes(r); got != "header X-Api-Key must be valid UTF-8 without NUL or control characters" {
		t.Errorf("header: %q", got)
	}
	r.Header.Set("X-Api-Key", "a\tb é")
	if got := request.BadBytes(r); got != "" {
		t.Errorf("a tab and UTF-8 in a header: %q", got)
	}
}

func TestAllowedMethods(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /jobs", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("POST /jobs", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/", func(http.ResponseWriter, *http.Request) {})
	if got := request.AllowedMethods(mux, httptest.NewRequest("DELETE", "/jobs", nil)); !slices.Equal(got, []string{"GET", "HEAD", "POST"}) {
		t.Errorf("/jobs: %v", got)
	}
	if got := request.AllowedMethods(mux, httptest.NewRequest("GET", "/nope", nil)); got != nil {
		t.Errorf("/nope: %v", got)
	}
}

// numbers is a where list of n integers, 0 to n-1.
func numbers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, i)
	}
	return "[" + b.String() + "]"
}

func TestParseWhere(t *testing.T) {
	for where, want := range map[string]string{
		`{"severity":"high"} x`:                             "where must be exactly one JSON object, with nothing after it",
		`{"severity":"high"}{"severity":"low"}`:             "where must be exactly one JSON object, with nothing after it",
		`{"severity":"low","severity":"high"}`:              `where: duplicate key "severity"`,
		`{"a":{"b":1,"b":2}}`:                               `where: duplicate key "b"`,
		`{"severity":["high"],"severity":"low"}`:            `where: duplicate key "severity"`,
		`{"severity":"\u0000"}`:                             `where must not contain \u0000 (a NUL character) in a string`,
		`{"severity":["low","a\u0000b"]}`:                   `where must not contain \u0000 (a NUL character) in a string`,
		`{"sev\u0000erity":"high"}`:                         `where must not contain \u0000 (a NUL character) in a string`,
		`{"block":` + numbers(1001) + `}`:                   "where holds more than 1000 values; at most 1000 in all (a list counts each of its values)",
		`{"block":` + numbers(1000) + `,"severity":"high"}`: "where holds more than 1000 values; at most 1000 in all (a list counts each of its values)",
		`[]`:                   `where must be a JSON object such as {"severity":"high"}`,
		`null`:                 `where must be a JSON object such as {"severity":"high"}`,
		``:                     `where must be a JSON object such as {"severity":"high"}`,
		`{"severity":"high"`:   `where must be a JSON object such as {"severity":"high"}`,
		`{"severity":"high",}`: `where must be a JSON object such as {"severity":"high"}`,
	} {
		_, err := request.ParseWhere(where, 1000)
		wantError(t, fmt.Sprintf("%.80q", where), err, http.StatusBadRequest, want)
	}
	got, err := request.ParseWhere(`{"block":`+numbers(998)+`,"severity":"high","n":{"big":12345678901234567890}}`, 1000)
	if err != nil || got["severity"] != "high" || len(got["block"].([]any)) != 998 ||
		got["n"].(map[string]any)["big"] != json.Number("12345678901234567890") {
		t.Fatalf("%.200v %v", got, err)
	}
}

func TestWaiting(t *testing.T) {
	w := request.NewWaiting(2)
	// Each acquire in order, with what it must answer: the calls have effects, so no expression
	// may fold two of them into one.
	for i, want := range []struct {
		key string
		ok  bool
	}{{"a", true}, {"a", true}, {"a", false}, {"b", true}} {
		if got := w.Acquire(want.key); got != want.ok {
			t.Fatalf("acquire %d of %q = %v, want %v: a cap of 2 per key", i, want.key, got, want.ok)
		}
	}
	if w.Max() != 2 {
		t.Fatalf("Max() = %d, want 2", w.Max())
	}
	w.Release("a")
	if got := w.Acquire("a"); !got {
		t.Fatal("a released place is not taken again")
	}
	if got := w.Acquire("a"); got {
		t.Fatal("a released place is taken twice")
	}
	for _, max := range []int{0, -1} {
		w := request.NewWaiting(max)
		for range 100 {
			if !w.Acquire("a") {
				t.Fatalf("max %d: refused", max)
			}
		}
	}
	// A recorder has no deadline to move: nothing happens.
	request.HoldOpen(httptest.NewRecorder(), 0)
}
