// Package ui serves the web dashboard: pages of a tenant's jobs, tasks, queues, dead letters,
// pipelines and datasets, rendered on the server and kept live over Server-Sent Events, for
// someone signed in with an API key. Everything it serves is embedded in the binary.
package ui

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/auth"
	"github.com/baton-dev/baton/internal/dataplane"
	"github.com/baton-dev/baton/internal/dataplane/reads"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/store"
)

//go:embed templates static
var files embed.FS

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

// Config configures the dashboard.
type Config struct {
	Dispatcher *dispatch.Dispatcher
	DataPlane  *dataplane.Plane // over Dispatcher; required
	Auth       *auth.Authenticator
	Logger     *slog.Logger
	// Poll is how often a live page looks for changes; default 1 s.
	Poll time.Duration
	// Done, when closed, ends the live streams (the server is shutting down).
	Done <-chan struct{}
	// Metrics, when not nil, counts the keys the dashboard refuses, as the API does.
	Metrics *metrics.Metrics
	// Workers is what workers said of themselves (their isolation), for the worker list; nil
	// shows none.
	Workers store.Workers
}

// UI is the dashboard's HTTP handler.
type UI struct {
	d      *dispatch.Dispatcher
	dp     *dataplane.Plane
	auth   *auth.Authenticator
	log    *slog.Logger
	poll   time.Duration
	done   <-chan struct{}
	metric *metrics.Metrics
	// workers: Config.Workers
	workers store.Workers
	pages   map[string]*template.Template
	assets  map[string]string // static file name → its URL, with a content hash against stale caches
	mux     *http.ServeMux
}

// The cookies of a signed-in browser. Both are HttpOnly and SameSite=Strict: no script reads
// them and no other site's page sends them.
const (
	keyCookie  = "baton_key"  // the API key the browser signed in with
	csrfCookie = "baton_csrf" // the token every form repeats (double-submit)
	sessionAge = 12 * time.Hour
)

// contentSecurityPolicy allows only the dashboard's own scripts, styles and connections: no
// inline script or style, no framing, forms posting only here.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// New returns the dashboard.
func New(cfg Config) (*UI, error) {
	u := &UI{d: cfg.Dispatcher, dp: cfg.DataPlane, auth: cfg.Auth, log: cfg.Logger, poll: cfg.Poll, done: cfg.Done, metric: cfg.Metrics,
		workers: cfg.Workers, pages: map[string]*template.Template{}, assets: map[string]string{}}
	if u.log == nil {
		u.log = slog.Default()
	}
	if u.poll <= 0 {
		u.poll = time.Second
	}
	for _, name := range []string{"app.js", "app.css"} {
		b, err := files.ReadFile("static/" + name)
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		u.assets[name] = Prefix + "static/" + name + "?v=" + hex.EncodeToString(sum[:6])
	}
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, path := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(path, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New(name).Funcs(u.funcs()).ParseFS(files, "templates/layout.html", path)
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", name, err)
		}
		u.pages[name] = t
	}
	u.mux = u.routes()
	return u, nil
}

func (u *UI) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /ui/{$}", http.RedirectHandler("/ui/jobs", http.StatusSeeOther))
	mux.HandleFunc("GET /ui/login", u.loginPage)
	mux.HandleFunc("POST /ui/login", u.login)
	mux.HandleFunc("POST /ui/logout", u.logout)
	static, _ := fs.Sub(files, "static")
	mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", staticFiles(http.FileServerFS(static))))
	mux.HandleFunc("GET /ui/jobs", u.page(u.jobs))
	mux.HandleFunc("GET /ui/jobs/{id}", u.page(u.job))
	mux.HandleFunc("GET /ui/jobs/{id}/live", u.signedIn(u.jobLive))
	mux.HandleFunc("POST /ui/jobs/{id}/cancel", u.action(u.cancel))
	mux.HandleFunc("POST /ui/jobs/{id}/resume", u.action(u.resume))
	mux.HandleFunc("GET /ui/jobs/{id}/tasks/{task}", u.page(u.task))
	mux.HandleFunc("GET /ui/queues", u.page(u.queues))
	mux.HandleFunc("GET /ui/dead-letters", u.page(u.deadLetters))
	mux.HandleFunc("GET /ui/pipelines", u.page(u.pipelines))
	mux.HandleFunc("GET /ui/pipelines/{name}", u.page(u.pipeline))
	mux.HandleFunc("POST /ui/pipelines/{name}/versions/{version}/activate", u.action(u.activate))
	mux.HandleFunc("POST /ui/pipelines/{name}/versions/{version}/abandon", u.action(u.abandon))
	mux.HandleFunc("GET /ui/datasets", u.page(u.datasets))
	mux.HandleFunc("GET /ui/datasets/{name}", u.page(u.dataset))
	mux.HandleFunc("/ui/", u.page(func(*http.Request, *session) (*view, error) { return nil, errNotFound }))
	return mux
}

// ServeHTTP serves the paths under Prefix, with the security headers of every answer.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	u.mux.ServeHTTP(w, r)
}

// staticFiles lets browsers keep the embedded assets: their URLs change with their content.
func staticFiles(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400")
		h.ServeHTTP(w, r)
	})
}

// session is a signed-in browser: the key's tenant and the form token.
type session struct {
	key  *store.APIKey
	csrf string
}

var errNotFound = errors.New("not found")

// signInError is why a browser has to sign in (again).
type signInError struct{ message string }

func (e *signInError) Error() string { return e.message }

// session authenticates the browser's key cookie, charging one request to the key's rate limit
// and quota like any API call.
func (u *UI) session(r *http.Request) (*session, error) {
	c, err := r.Cookie(keyCookie)
	if err != nil || c.Value == "" {
		return nil, &signInError{}
	}
	k, err := u.auth.Authenticate(r.Context(), c.Value)
	u.metric.APIKeyRejected(err)
	switch {
	case errors.Is(err, auth.ErrBadKey) || errors.Is(err, auth.ErrNoKey):
		return nil, &signInError{"The API key you signed in with is no longer valid (revoked?). Sign in again."}
	case err != nil:
		return nil, err
	}
	s := &session{key: k}
	if c, err := r.Cookie(csrfCookie); err == nil {
		s.csrf = c.Value
	}
	return s, nil
}

// view is what a page handler answers: a template and its data.
type view struct {
	page   string // template name
	title  string
	nav    string // the menu entry to highlight
	status int    // default 200
	data   any
	live   bool // the page's main part is re-rendered and pushed while it is open
	// redirect, when set, answers with a redirect there instead of a page.
	redirect string
}

// pageData is what every template gets.
type pageData struct {
	Title, Nav, Tenant, CSRF string
	Live                     bool
	Flash, FlashKind         string
	Data                     any
	Assets                   map[string]string
}

// page serves a page for a signed-in browser: it renders it, or, for a browser's EventSource on
// a live page (Accept: text/event-stream), pushes its main part each time it changes.
func (u *UI) page(fn func(*http.Request, *session) (*view, error)) http.HandlerFunc {
	return u.signedIn(func(w http.ResponseWriter, r *http.Request, s *session) {
		v, err := fn(r, s)
		if err != nil {
			u.fail(w, r, s, err)
			return
		}
		if v.redirect != "" {
			http.Redirect(w, r, v.redirect, http.StatusSeeOther)
			return
		}
		if v.live && strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			u.streamMain(w, r, s, fn)
			return
		}
		u.render(w, r, s, v)
	})
}

// signedIn runs fn with the browser's session, or sends the browser to the sign-in page.
func (u *UI) signedIn(fn func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		s, err := u.session(r)
		var si *signInError
		if errors.As(err, &si) {
			if si.message != "" {
				clearCookies(w, r)
			}
			q := url.Values{"next": {r.URL.RequestURI()}}
			if si.message != "" {
				q.Set("expired", "1")
			}
			if r.Method != http.MethodGet || strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
				http.Error(w, "sign in first: "+Prefix+"login", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/ui/login?"+q.Encode(), http.StatusSeeOther)
			return
		}
		if err != nil {
			u.fail(w, r, nil, err)
			return
		}
		fn(w, r, s)
	}
}

// render writes a page.
func (u *UI) render(w http.ResponseWriter, r *http.Request, s *session, v *view) {
	d := pageData{Title: v.title, Nav: v.nav, Live: v.live, Data: v.data, Assets: u.assets}
	if s != nil {
		d.Tenant, d.CSRF = s.key.Tenant, s.csrf
	}
	if msg, ok := flashes[r.URL.Query().Get("flash")]; ok {
		d.Flash, d.FlashKind = msg.text, msg.kind
	}
	var buf bytes.Buffer
	if err := u.pages[v.page].ExecuteTemplate(&buf, "layout", d); err != nil {
		u.log.ErrorContext(r.Context(), "ui: render", "page", v.page, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(cmpOr(v.status, http.StatusOK))
	buf.WriteTo(w)
}

func cmpOr(v, def int) int {
	if v != 0 {
		return v
	}
	return def
}

// fail renders the error page of err.
func (u *UI) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	status, msg := http.StatusInternalServerError, "Something went wrong on the server; it is logged."
	var limit *auth.LimitError
	switch {
	case errors.Is(err, errNotFound):
		status, msg = http.StatusNotFound, "There is no such page."
	case errors.Is(err, dispatch.ErrJobNotFound):
		status, msg = http.StatusNotFound, "Job not found. It does not exist, or it belongs to another tenant."
	case errors.Is(err, dispatch.ErrTaskNotFound):
		status, msg = http.StatusNotFound, "Task not found in this job."
	case errors.Is(err, dataplane.ErrPipelineNotFound):
		status, msg = http.StatusNotFound, "Pipeline not found."
	case errors.Is(err, reads.ErrDatasetNotFound):
		status, msg = http.StatusNotFound, "Dataset not found."
	case errors.Is(err, dispatch.ErrInvalidCursor):
		status, msg = http.StatusBadRequest, "That page link is not valid: start again from the first page."
	case errors.As(err, &limit):
		status, msg = http.StatusTooManyRequests, fmt.Sprintf("This API key is over its %s; try again in %s.",
			map[bool]string{true: "daily request quota", false: "rate limit"}[limit.Quota], limit.RetryAfter.Round(time.Second))
		w.Header().Set("Retry-After", fmt.Sprint(max(int(limit.RetryAfter.Seconds()), 1)))
	case errors.Is(err, context.Canceled):
		return
	default:
		u.log.ErrorContext(r.Context(), "ui: request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	u.render(w, r, s, &view{page: "error", title: http.StatusText(status), status: status, data: msg})
}

// action serves a form's POST: it checks the form token, runs fn and redirects (303) to where fn
// says, with a message to show there.
func (u *UI) action(fn func(*http.Request, *session) (to, flash string, err error)) http.HandlerFunc {
	return u.signedIn(func(w http.ResponseWriter, r *http.Request, s *session) {
		if err := checkForm(r, s.csrf); err != nil {
			u.render(w, r, s, &view{page: "error", title: "Forbidden", status: http.StatusForbidden, data: err.Error()})
			return
		}
		to, flash, err := fn(r, s)
		if err != nil {
			u.fail(w, r, s, err)
			return
		}
		http.Redirect(w, r, to+"?flash="+flash, http.StatusSeeOther)
	})
}

// checkForm refuses a POST whose form token does not match the browser's cookie, or that another
// site's page sent.
func checkForm(r *http.Request, want string) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		//lint:ignore ST1005 the page shows this sentence as it is
		return errors.New("This form was sent from another site; it was refused.")
	}
	r.Body = http.MaxBytesReader(nil, r.Body, 64<<10)
	got := r.PostFormValue("csrf")
	if want == "" || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		//lint:ignore ST1005 the page shows this sentence as it is
		return errors.New("This form has expired or did not come from this dashboard (its CSRF token does not match). Reload the page and try again.")
	}
	return nil
}

// The messages a redirect after an action shows, by name (never text from the query string).
var flashes = map[string]struct{ text, kind string }{
	"canceled":     {"Cancellation requested: waiting and pending tasks are canceled, running ones are asked to stop.", "ok"},
	"resumed":      {"Job resumed: its failed, canceled and skipped tasks run again.", "ok"},
	"finished":     {"The job has already finished: there is nothing to cancel.", "error"},
	"not-finished": {"The job is still processing: only a finished job can be resumed.", "error"},
	"nothing":      {"Every task of the job completed: there is nothing to resume.", "error"},
	"signed-out":   {"Signed out.", "ok"},
	"activated": {"Version activated: the rebuilt datasets and the pipeline moved to it together; " +
		"the replaced version's unfinished tasks of the rebuilt jobs are canceled.", "ok"},
	"activated-cancel-failed": {"Version activated, but canceling the replaced version's unfinished tasks of the rebuilt jobs failed " +
		"(it is logged): some may still run.", "error"},
	"abandoned": {"Build abandoned: its unfinished tasks are canceled; the active version and its datasets are as they were.", "ok"},
	"not-ready": {"The build is not ready yet: it can be activated once every rebuilt job has caught up.", "error"},
	"not-building": {"That version is not being built any more (it was activated, abandoned or replaced by a newer deploy): " +
		"the page shows the pipeline as it is now.", "error"},
}

func newToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("ui: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func setCookie(w http.ResponseWriter, r *http.Request, name, value string, age time.Duration) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/ui", MaxAge: int(age.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"})
}

func clearCookies(w http.ResponseWriter, r *http.Request) {
	for _, name := range []string{keyCookie, csrfCookie} {
		http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/ui", MaxAge: -1, HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	}
}

// loginData is the sign-in page's.
type loginData struct {
	Next, Error string
}

// loginPage is the sign-in form. It sets the form token cookie the sign-in POST must repeat.
func (u *UI) loginPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	token := newToken()
	setCookie(w, r, csrfCookie, token, sessionAge)
	d := loginData{Next: safeNext(r.URL.Query().Get("next"))}
	if r.URL.Query().Get("expired") != "" {
		d.Error = "The API key you signed in with is no longer valid (revoked?). Sign in again."
	}
	u.renderLogin(w, r, token, d, http.StatusOK)
}

func (u *UI) renderLogin(w http.ResponseWriter, r *http.Request, token string, d loginData, status int) {
	u.render(w, r, &session{key: &store.APIKey{}, csrf: token}, &view{page: "login", title: "Sign in", status: status, data: d})
}

// login checks the key of the sign-in form and keeps it in the key cookie.
func (u *UI) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var token string
	if c, err := r.Cookie(csrfCookie); err == nil {
		token = c.Value
	}
	if err := checkForm(r, token); err != nil {
		token = newToken()
		setCookie(w, r, csrfCookie, token, sessionAge)
		u.renderLogin(w, r, token, loginData{Error: err.Error()}, http.StatusForbidden)
		return
	}
	next := safeNext(r.PostFormValue("next"))
	key := strings.TrimSpace(r.PostFormValue("key"))
	_, err := u.auth.Authenticate(r.Context(), key)
	u.metric.APIKeyRejected(err)
	var limit *auth.LimitError
	switch {
	case errors.Is(err, auth.ErrNoKey):
		u.renderLogin(w, r, token, loginData{Next: next, Error: "Enter an API key."}, http.StatusUnauthorized)
		return
	case errors.Is(err, auth.ErrBadKey):
		u.renderLogin(w, r, token, loginData{Next: next, Error: "That API key is not valid: it is unknown or has been revoked."}, http.StatusUnauthorized)
		return
	case errors.As(err, &limit):
		u.renderLogin(w, r, token, loginData{Next: next, Error: "That API key is over its rate limit or daily quota; try again later."}, http.StatusTooManyRequests)
		return
	case err != nil:
		u.fail(w, r, nil, err)
		return
	}
	setCookie(w, r, keyCookie, key, sessionAge)
	setCookie(w, r, csrfCookie, newToken(), sessionAge) // a fresh token for the session
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout forgets the key.
func (u *UI) logout(w http.ResponseWriter, r *http.Request) {
	var token string
	if c, err := r.Cookie(csrfCookie); err == nil {
		token = c.Value
	}
	if err := checkForm(r, token); err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	clearCookies(w, r)
	http.Redirect(w, r, "/ui/login?flash=signed-out", http.StatusSeeOther)
}

// safeNext is where to go after signing in: a dashboard path, never another site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return "/ui/jobs"
	}
	return next
}
