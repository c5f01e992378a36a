// Package metrics is the Prometheus collectors of a Baton server: the dispatcher's transitions,
// claims and group commits, the reaper's expiries, retries and dead letters, the tasks and the
// outbox as periodic queries see them, and the HTTP requests and refused credentials of both
// listeners. One Metrics owns its own registry (never the global one) and serves it on
// GET /metrics (Handler).
//
// Every method is safe on a nil *Metrics and then does nothing, so that code paths of a server
// started without metrics pay one nil check. Label values are resolved once, in New, or cached
// on first use (HTTP routes), so that the hot path does not build label sets.
package metrics

import (
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/baton-dev/baton/internal/auth"

	"github.com/baton-dev/baton/internal/lifecycle"
	"github.com/baton-dev/baton/internal/store"
)

// Kind is the kind of a dispatcher transition, the kind label of baton_transitions_total.
type Kind uint8

// The transitions the dispatcher counts.
const (
	Claim     Kind = iota // a worker (or the push dispatcher) leased a task
	Heartbeat             // a running attempt extended its lease
	Complete              // an attempt reported success
	Fail                  // an attempt reported failure
	Stop                  // an attempt reported that it stopped after a cancel request
	Cancel                // a producer canceled a task or a job
	Resume                // a producer resumed a finished job
	Expire                // the reaper timed out an attempt
	Create                // a producer created a job
	AddTasks              // a producer added tasks to a job
	numKinds
)

var kindNames = [numKinds]string{"claim", "heartbeat", "complete", "fail", "stop", "cancel", "resume", "expire", "create", "add_tasks"}

func (k Kind) String() string { return kindNames[k] }

// Outcome is how a transition ended, the outcome label of baton_transitions_total.
type Outcome uint8

const (
	// OK: the transition was applied (or found already applied: an idempotent repeat).
	OK Outcome = iota
	// Refused: the rules refused it: a lost lease, a stale attempt, a task that already ended,
	// a bad argument.
	Refused
	// Error: it failed for another reason: the database, a canceled request.
	Error
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "refused", "error"}

func (o Outcome) String() string { return outcomeNames[o] }

// Expiry is why the reaper's rule timed an attempt out, the reason label of
// baton_reaper_expiries_total.
type Expiry uint8

const (
	LeaseExpired  Expiry = iota // no heartbeat within the heartbeat timeout
	Deadline                    // the execution timeout passed
	CancelTimeout               // a canceled attempt did not stop within its grace period
	numExpiries
)

var expiryNames = [numExpiries]string{"lease_expired", "deadline", "cancel_timeout"}

func (e Expiry) String() string { return expiryNames[e] }

// ExpiryOf maps a task error's reason (lifecycle.ReasonHeartbeatTimeout, ...) to its Expiry.
func ExpiryOf(reason string) Expiry {
	switch reason {
	case lifecycle.ReasonExecutionTimeout:
		return Deadline
	case lifecycle.ReasonCancelTimeout:
		return CancelTimeout
	}
	return LeaseExpired
}

// Credential is the kind of a refused credential, the kind label of
// baton_credentials_rejected_total.
type Credential uint8

const (
	APIKeyMissing          Credential = iota // no x-api-key
	APIKeyInvalid                            // an unknown key
	APIKeyRevoked                            // a revoked key
	RateLimited                              // the key's request rate is exceeded
	QuotaExceeded                            // the key's daily quota is spent
	CapabilityTokenMissing                   // no X-Trace-Task-Capability
	CapabilityTokenInvalid                   // malformed, tampered with or signed by an unknown key
	CapabilityTokenExpired                   // past its expiry
	TokenScope                               // a capability or callback token valid, but for another task or attempt
	CallbackTokenMissing                     // no Authorization: Bearer
	CallbackTokenInvalid
	CallbackTokenExpired
	numCredentials
)

var credentialNames = [numCredentials]string{"api_key_missing", "api_key_invalid", "api_key_revoked", "rate_limited", "quota_exceeded",
	"capability_token_missing", "capability_token_invalid", "capability_token_expired", "token_scope",
	"callback_token_missing", "callback_token_invalid", "callback_token_expired"}

func (c Credential) String() string { return credentialNames[c] }

// numCategories is lifecycle.Categories and one slot for a category it does not know.
var numCategories = len(lifecycle.Categories) + 1

// maxCategories is the room for categories in a Tally.
const maxCategories = 8

func init() {
	if numCategories > maxCategories {
		panic("metrics: more error categories than a Tally has room for: raise maxCategories")
	}
}

// categoryIndex is c's slot in Tally and in the per-category counters.
func categoryIndex(c lifecycle.Category) int {
	for i, k := range lifecycle.Categories {
		if k == c {
			return i
		}
	}
	return len(lifecycle.Categories)
}

func categoryName(i int) string {
	if i < len(lifecycle.Categories) {
		return string(lifecycle.Categories[i])
	}
	return "OTHER"
}

// Bucket bounds, in seconds or transitions.
var (
	waitBuckets     = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60}
	handOffBuckets  = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	batchBuckets    = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}
	commitBuckets   = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	pauseBuckets    = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}
	httpBuckets     = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	claimWaitLabels = [2]string{"claimed", "empty"}
)

// Metrics is the collectors of one server, in a registry of their own.
type Metrics struct {
	reg *prometheus.Registry

	transitions   [numKinds][numOutcomes]prometheus.Counter
	retries       []prometheus.Counter // by categoryIndex
	deadLetters   []prometheus.Counter
	expiries      [numExpiries]prometheus.Counter
	credentials   [numCredentials]prometheus.Counter
	claimWait     [2]prometheus.Observer // claimed, empty
	handOff       prometheus.Observer
	commitBatch   prometheus.Observer
	commitSeconds prometheus.Observer

	retention map[string]prometheus.Counter // rows deleted by retention, by table

	tasks        *prometheus.GaugeVec
	outboxUnsent prometheus.Gauge
	outboxOldest prometheus.Gauge
	heldRoutings prometheus.Gauge // backpressure
	pausedJobs   prometheus.Gauge
	longestPause prometheus.Gauge
	heldEvents   prometheus.Counter
	coalesced    prometheus.Counter
	released     prometheus.Counter
	pauses       prometheus.Observer
	tasksMu      sync.Mutex         // serialises setTasks
	taskSeries   map[[2]string]bool // the (queue, state) series set so far (gauges.go)

	httpRequests *prometheus.CounterVec
	httpSeconds  *prometheus.HistogramVec
	httpMu       sync.RWMutex
	httpCount    map[httpKey]prometheus.Counter
	httpObserve  map[httpKey]prometheus.Observer // code 0
}

// New returns the collectors of a server, registered with a new registry together with the Go
// runtime's and the process's collectors.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	f := factory{reg}
	m := &Metrics{reg: reg, taskSeries: map[[2]string]bool{}, httpCount: map[httpKey]prometheus.Counter{}, httpObserve: map[httpKey]prometheus.Observer{}}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	transitions := f.counterVec("baton_transitions_total", "Task and job transitions the dispatcher applied (ok), the rules refused (refused: a lost lease, a stale attempt, a task that already ended, a bad argument) or that failed (error), by kind.", "kind", "outcome")
	for k := range numKinds {
		for o := range numOutcomes {
			m.transitions[k][o] = transitions.WithLabelValues(k.String(), o.String())
		}
	}
	retries := f.counterVec("baton_task_retries_total", "Failed attempts whose task was scheduled to run again, by error category.", "category")
	dead := f.counterVec("baton_task_dead_letters_total", "Tasks that failed for good (dead-lettered), by error category of their last attempt.", "category")
	for i := range numCategories {
		m.retries = append(m.retries, retries.WithLabelValues(categoryName(i)))
		m.deadLetters = append(m.deadLetters, dead.WithLabelValues(categoryName(i)))
	}
	expiries := f.counterVec("baton_reaper_expiries_total", "Attempts timed out by the reaper's rule (by the reaper, or by a heartbeat that found its lease run out), by reason.", "reason")
	for e := range numExpiries {
		m.expiries[e] = expiries.WithLabelValues(e.String())
	}
	creds := f.counterVec("baton_credentials_rejected_total", "Requests refused for their credential (API key, rate limit, quota, capability or callback token), by kind.", "kind")
	for c := range numCredentials {
		m.credentials[c] = creds.WithLabelValues(c.String())
	}
	claimWait := f.histogramVec("baton_claim_wait_seconds", "How long a claim long poll waited before it got a task (claimed) or gave up (empty).", waitBuckets, "result")
	for i, l := range claimWaitLabels {
		m.claimWait[i] = claimWait.WithLabelValues(l)
	}
	m.handOff = f.histogram("baton_task_handoff_seconds", "From the time a task became claimable (its available time) to its claim.", handOffBuckets)
	m.commitBatch = f.histogram("baton_commit_batch_transitions", "Transitions applied per group-commit transaction.", batchBuckets)
	m.commitSeconds = f.histogram("baton_commit_duration_seconds", "How long a group-commit transaction took, from its first statement to its commit.", commitBuckets)

	retention := f.counterVec("baton_retention_deleted_total", "Rows of finished jobs deleted by retention (--retention), by table.", "table")
	m.retention = map[string]prometheus.Counter{}
	for _, tc := range (store.RetentionCounts{}).Tables() {
		m.retention[tc.Table] = retention.WithLabelValues(tc.Table)
	}

	m.tasks = f.gaugeVec("baton_tasks", "Tasks per queue that are waiting, pending or running, and dead-lettered ones (state dead_lettered), as of the last periodic count.", "queue", "state")
	m.outboxUnsent = f.gauge("baton_outbox_unsent_messages", "Outbox messages not sent yet, as of the last periodic count.")
	m.outboxOldest = f.gauge("baton_outbox_oldest_unsent_age_seconds", "How long the oldest unsent outbox message has been due (0 when none is), as of the last periodic count.")
	m.heldRoutings = f.gauge("baton_backpressure_held_events", "Dataset events whose routing to a pipeline job backpressure holds, as of the last periodic count.")
	m.pausedJobs = f.gauge("baton_backpressure_paused_jobs", "Pipeline jobs that hold routings, as of the last periodic count.")
	m.longestPause = f.gauge("baton_backpressure_longest_pause_seconds", "How long the longest current backpressure pause of a pipeline job has lasted (0 when none is paused), as of the last periodic count.")

	m.heldEvents = f.counter("baton_backpressure_events_held_total", "Dataset events whose routing to a pipeline job backpressure held instead of creating a task (coalesced ones included).")
	m.coalesced = f.counter("baton_backpressure_events_coalesced_total", "Held dataset events that joined a held routing of their scope (backpressure_mode coalesce) instead of adding one.")
	m.released = f.counter("baton_backpressure_events_released_total", "Held dataset events released once their job's backlog drained (a released routing that coalesced several counts each).")
	m.pauses = f.histogram("baton_backpressure_pause_duration_seconds", "How long the backpressure pauses of pipeline jobs that ended lasted: from the first held routing to the release of the last.", pauseBuckets)

	m.httpRequests = f.counterVec("baton_http_requests_total", "HTTP requests answered, by listener, route pattern, method and status code; a long poll or an event stream counts when it ends.", "listener", "route", "method", "code")
	m.httpSeconds = f.histogramVec("baton_http_request_duration_seconds", "How long HTTP requests took to answer, by listener, route pattern and method.", httpBuckets, "listener", "route", "method")
	return m
}

// factory makes collectors and registers them.
type factory struct{ reg *prometheus.Registry }

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.reg.MustRegister(h)
	return h
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

// Registry is the registry of m's collectors.
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// Handler serves the registry in the Prometheus exposition formats (GET /metrics).
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Transitions counts n transitions of kind k that ended with o.
func (m *Metrics) Transitions(k Kind, o Outcome, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.transitions[k][o].Add(float64(n))
}

// ClaimWait records how long a claim long poll waited, and whether it got a task.
func (m *Metrics) ClaimWait(d time.Duration, claimed bool) {
	if m == nil {
		return
	}
	i := 1
	if claimed {
		i = 0
	}
	m.claimWait[i].Observe(d.Seconds())
}

// HandOff records how long a task waited, claimable, before it was claimed.
func (m *Metrics) HandOff(d time.Duration) {
	if m == nil {
		return
	}
	m.handOff.Observe(max(d, 0).Seconds())
}

// Commit records a group-commit transaction of size transitions that took d.
func (m *Metrics) Commit(size int, d time.Duration) {
	if m == nil {
		return
	}
	m.commitBatch.Observe(float64(size))
	m.commitSeconds.Observe(d.Seconds())
}

// RetentionDeleted counts the rows a retention batch deleted.
func (m *Metrics) RetentionDeleted(c store.RetentionCounts) {
	if m == nil {
		return
	}
	for _, tc := range c.Tables() {
		if tc.N > 0 {
			m.retention[tc.Table].Add(float64(tc.N))
		}
	}
}

// CredentialRejected counts a request refused for its credential.
func (m *Metrics) CredentialRejected(c Credential) {
	if m == nil {
		return
	}
	m.credentials[c].Inc()
}

// APIKeyRejection is the kind of an error of auth.Authenticator.Authenticate that refuses the
// key: a missing, unknown or revoked key, or one over its rate or quota. ok is false for any
// other error (the database failed: not the key's fault).
func APIKeyRejection(err error) (c Credential, ok bool) {
	var limit *auth.LimitError
	switch {
	case errors.Is(err, auth.ErrNoKey):
		return APIKeyMissing, true
	case errors.Is(err, auth.ErrRevokedKey):
		return APIKeyRevoked, true
	case errors.Is(err, auth.ErrBadKey):
		return APIKeyInvalid, true
	case errors.As(err, &limit) && limit.Quota:
		return QuotaExceeded, true
	case errors.As(err, &limit):
		return RateLimited, true
	}
	return 0, false
}

// Rejection is the kind of an error that refuses a credential: an API key (APIKeyRejection) or a
// task token, the callback dialect's bearer token when callback is true and a capability token
// otherwise (auth's ErrTokenMissing, ErrTokenExpired, ErrTokenInvalid, ErrTokenScope). ok is false
// for any other error (the database failed while the credential was looked up: not the
// credential's fault).
func Rejection(err error, callback bool) (c Credential, ok bool) {
	if c, ok := APIKeyRejection(err); ok {
		return c, true
	}
	token := func(capability, cb Credential) (Credential, bool) {
		if callback {
			return cb, true
		}
		return capability, true
	}
	switch {
	case errors.Is(err, auth.ErrTokenMissing):
		return token(CapabilityTokenMissing, CallbackTokenMissing)
	case errors.Is(err, auth.ErrTokenExpired):
		return token(CapabilityTokenExpired, CallbackTokenExpired)
	case errors.Is(err, auth.ErrTokenInvalid):
		return token(CapabilityTokenInvalid, CallbackTokenInvalid)
	case errors.Is(err, auth.ErrTokenScope):
		return TokenScope, true
	}
	return 0, false
}

// APIKeyRejected counts err when it refuses an API key (APIKeyRejection).
func (m *Metrics) APIKeyRejected(err error) {
	if c, ok := APIKeyRejection(err); ok {
		m.CredentialRejected(c)
	}
}

// Tally is what one transaction did that is counted once it committed: retries and dead letters
// by category, expiries by reason. The dispatcher fills one per transaction (its zero value is
// empty) and hands it to Record after the commit, so that a transaction rolled back or tried
// again counts nothing twice.
type Tally struct {
	retries, deadLetters [maxCategories]uint32 // by categoryIndex
	expiries             [numExpiries]uint32
	any                  bool
}

// Retry notes a failed attempt whose task will run again.
func (t *Tally) Retry(c lifecycle.Category) { t.retries[categoryIndex(c)]++; t.any = true }

// DeadLetter notes a task that failed for good.
func (t *Tally) DeadLetter(c lifecycle.Category) {
	t.deadLetters[categoryIndex(c)]++
	t.any = true
}

// Expiry notes an attempt timed out by the reaper's rule.
func (t *Tally) Expiry(e Expiry) { t.expiries[e]++; t.any = true }

// Add adds o's counts to t.
func (t *Tally) Add(o *Tally) {
	if !o.any {
		return
	}
	for i := range t.retries {
		t.retries[i] += o.retries[i]
		t.deadLetters[i] += o.deadLetters[i]
	}
	for i := range t.expiries {
		t.expiries[i] += o.expiries[i]
	}
	t.any = true
}

// Record counts what a committed transaction did.
func (m *Metrics) Record(t *Tally) {
	if m == nil || !t.any {
		return
	}
	for i := range numCategories {
		if n := t.retries[i]; n > 0 {
			m.retries[i].Add(float64(n))
		}
		if n := t.deadLetters[i]; n > 0 {
			m.deadLetters[i].Add(float64(n))
		}
	}
	for i, n := range t.expiries {
		if n > 0 {
			m.expiries[i].Add(float64(n))
		}
	}
}

// Backpressure counts what one committed routing transaction did with held events: events
// held (coalesced ones included), coalesced and released, and the pauses that ended.
func (m *Metrics) Backpressure(held, coalesced, released int, pauses []time.Duration) {
	if m == nil {
		return
	}
	if held > 0 {
		m.heldEvents.Add(float64(held))
	}
	if coalesced > 0 {
		m.coalesced.Add(float64(coalesced))
	}
	if released > 0 {
		m.released.Add(float64(released))
	}
	for _, p := range pauses {
		m.pauses.Observe(p.Seconds())
	}
}

// httpKey names the series of one HTTP route; code is 0 for the duration histogram's.
type httpKey struct {
	listener, route, method string
	code                    int
}

// requestSeries returns the counter and the duration histogram of k, made on first use.
func (m *Metrics) requestSeries(k httpKey) (prometheus.Counter, prometheus.Observer) {
	dk := k
	dk.code = 0
	m.httpMu.RLock()
	c, okc := m.httpCount[k]
	o, oko := m.httpObserve[dk]
	m.httpMu.RUnlock()
	if okc && oko {
		return c, o
	}
	m.httpMu.Lock()
	defer m.httpMu.Unlock()
	if c, okc = m.httpCount[k]; !okc {
		c = m.httpRequests.WithLabelValues(k.listener, k.route, k.method, strconv.Itoa(k.code))
		m.httpCount[k] = c
	}
	if o, oko = m.httpObserve[dk]; !oko {
		o = m.httpSeconds.WithLabelValues(k.listener, k.route, k.method)
		m.httpObserve[dk] = o
	}
	return c, o
}
