// Package apidocs is the rendered API reference that the public listener serves at GET /docs/api:
// a small HTML page that has Redoc render /openapi.json. Every byte the page needs is embedded in
// the binary, so viewing it reaches no other host: no CDN, no web fonts.
//
// The page's URLs are relative, so that it also works behind a proxy that serves the listener
// under a path prefix: from /docs/api, "api/redoc.standalone.js" is /docs/api/redoc.standalone.js
// and "../openapi.json" is /openapi.json. (From /docs/api/, with a trailing slash, they would
// resolve one level too deep: that URL is not served.)
package apidocs

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// RedocVersion is the version of the npm package redoc whose bundle is embedded; see README.md.
const RedocVersion = "2.5.4"

// Script is Redoc's standalone bundle, as scripts/update-redoc.sh wrote it.
//
//go:embed redoc.standalone.js
var Script []byte

// ContentSecurityPolicy is the page's policy: nothing from another origin, and no inline script.
// Redoc needs the rest, as the browser test shows: it injects its styles as <style> elements
// (styled-components), so styles need 'unsafe-inline' (without it nothing renders); its search
// index runs in a worker it builds from a blob: URL; it fetches the document (connect-src); and
// some of its icons are data: URLs. It loads no font: it names Roboto and Montserrat, which the
// browser uses only if they are installed, else its sans-serif.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; connect-src 'self'; worker-src blob:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// scriptTag is the first 16 hex digits of the bundle's SHA-256: its ETag, and the version in the
// URL the page loads it from, so a browser that keeps it for a year asks again after an upgrade.
var scriptTag = func() string {
	sum := sha256.Sum256(Script)
	return hex.EncodeToString(sum[:8])
}()

// ScriptETag is the strong ETag of GET /docs/api/redoc.standalone.js.
var ScriptETag = `"` + scriptTag + `"`

// page is the HTML of GET /docs/api. Redoc's standalone bundle renders the <redoc> element with
// its spec-url when it loads. The data: icon spares the browser a request for /favicon.ico.
var page = []byte(fmt.Sprintf(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<link rel="icon" href="data:,">
<title>Baton API reference</title>
<style>body { margin: 0; padding: 0; }</style>
</head>
<body>
<noscript>The API reference needs JavaScript. The description it renders is <a href="../openapi.json">/openapi.json</a>.</noscript>
<redoc spec-url="../openapi.json"></redoc>
<script src="api/redoc.standalone.js?v=%s"></script>
</body>
</html>
`, scriptTag))

// securityHeaders sets the headers that both answers carry.
func securityHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// ServePage answers GET /docs/api: the page, which the browser asks again each time (it is small,
// and it names the bundle's current version).
func ServePage(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	securityHeaders(h)
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Type", "text/html; charset=utf-8")
	write(w, r, page)
}

// ServeScript answers GET /docs/api/redoc.standalone.js: the embedded bundle, which a browser may
// keep for a year (its URL in the page changes with its content), with an ETag for the
// conditional requests of other clients.
func ServeScript(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	securityHeaders(h)
	h.Set("Cache-Control", "public, max-age=31536000, immutable")
	h.Set("ETag", ScriptETag)
	h.Set("Content-Type", "application/javascript; charset=utf-8")
	if ifNoneMatch(r.Header.Get("If-None-Match"), ScriptETag) {
		h.Del("Content-Type")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	write(w, r, Script)
}

// write answers 200 with body, and without it to HEAD. (Not http.ServeContent: its answers to
// Range and If-Match requests are plain text, where every error of this listener is JSON; and
// nothing here needs ranges.)
func write(w http.ResponseWriter, r *http.Request, body []byte) {
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// ifNoneMatch reports whether an If-None-Match header names etag (weakly compared) or is "*".
func ifNoneMatch(header, etag string) bool {
	for _, tag := range strings.Split(header, ",") {
		tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
		if tag == "*" || tag == etag {
			return true
		}
	}
	return false
}
