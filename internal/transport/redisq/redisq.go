// Package redisq is the Redis Streams driver of transport.Transport.
//
// Each queue has one stream, Prefix+"wake:"+queue, whose entries carry a task id; every worker
// reads it through one consumer group. Acknowledging a wake-up acks and deletes its entry in
// one MULTI, so a stream holds exactly the wake-ups that are outstanding and XLEN counts them.
//
// The group is created at id 0 by whoever first finds it missing (a consumer, as NOGROUP), so
// entries published before it existed, or after a FLUSHALL wiped it, are still delivered.
package redisq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-dev/baton/internal/transport"
)

// Options tunes Open. The zero value is valid.
type Options struct {
	Prefix string // key prefix, default "baton:"; the stream of queue q is Prefix+"wake:"+q
	Group  string // consumer group, default "baton-workers"
	// PublishTimeout bounds every Publish, default 5s: Publish runs inside a database
	// transaction and must not hold it while the server is unreachable.
	PublishTimeout time.Duration
}

func (o Options) withDefaults() Options {
	o.Prefix = cmp.Or(o.Prefix, "baton:")
	o.Group = cmp.Or(o.Group, "baton-workers")
	o.PublishTimeout = cmp.Or(o.PublishTimeout, 5*time.Second)
	return o
}

// Validate reports options no transport can use.
func (o Options) Validate() error {
	if o.PublishTimeout < 0 {
		return fmt.Errorf("redis: negative publish timeout %s", o.PublishTimeout)
	}
	return nil
}

// reclaimer is the consumer that Reclaim moves abandoned wake-ups to.
const reclaimer = "baton-reconciler"

// Transport is a transport.Transport on a Redis server.
type Transport struct {
	client *redis.Client
	opts   Options
	keys   string // the prefix of every stream key: Prefix+"wake:"
}

var (
	_ transport.Transport  = (*Transport)(nil)
	_ transport.MessageIDs = (*Transport)(nil)
)

// Open connects to the Redis server at url (redis://[user:password@]host:port/db, with the
// query options redis.ParseURL accepts), pings it, and returns the transport.
func Open(ctx context.Context, url string, opts Options) (*Transport, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o, err := clientOptions(url)
	if err != nil {
		return nil, err
	}
	client := redis.NewClient(o)
	if err := client.Ping(ctx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("redis: connect to %s (db %d): %w", o.Addr, o.DB, err)
	}
	return newTransport(client, opts), nil
}

// clientOptions parses url into the options of the client Open makes.
func clientOptions(rawURL string) (*redis.Options, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		// url.Parse quotes the whole URL, password included, in its error.
		if uerr, ok := errors.AsType[*url.Error](err); ok {
			uerr.URL = "(redacted)"
		}
		return nil, fmt.Errorf("redis: bad URL: %w", err)
	}
	// Socket deadlines follow the context's deadline, so Publish returns within PublishTimeout
	// even from a server that accepted the connection and went silent. Blocking reads are not
	// cut short by this: Receive never blocks past its context's deadline.
	o.ContextTimeoutEnabled = true
	return o, nil
}

func newTransport(client *redis.Client, opts Options) *Transport {
	opts = opts.withDefaults()
	return &Transport{client: client, opts: opts, keys: opts.Prefix + "wake:"}
}

// Name implements transport.Transport.
func (t *Transport) Name() string { return "redis" }

func (t *Transport) stream(queue string) string { return t.keys + queue }

// ids is the hash of queue's outstanding wake-ups: task id → the entry id of its latest one.
// Workers of the stream-worker dialect are told the entry id of the task they claimed (the
// message they would acknowledge), which the server finds here.
func (t *Transport) ids(queue string) string { return t.opts.Prefix + "wakeid:" + queue }

// publishScript adds a wake-up to the stream (KEYS[1]) and records its entry id under its task
// (ARGV[1]) in the ids hash (KEYS[2]), atomically.
var publishScript = redis.NewScript(`
local id = redis.call('XADD', KEYS[1], '*', 'task_id', ARGV[1], 'queue', ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], id)
return id`)

// settleScript acknowledges entry ARGV[2] of stream KEYS[1] in group ARGV[1], deletes it, and
// forgets it in the ids hash KEYS[2] unless task ARGV[3] has a newer wake-up there. A missing
// group (NOGROUP: nobody ever read the stream) has nothing to acknowledge.
var settleScript = redis.NewScript(`
redis.pcall('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
if ARGV[3] ~= '' and redis.call('HGET', KEYS[2], ARGV[3]) == ARGV[2] then
  redis.call('HDEL', KEYS[2], ARGV[3])
end
return 1`)

// Publish implements transport.Transport: one pipeline of XADDs (each with its entry id recorded
// by task), bounded by PublishTimeout. It does not create consumer groups; the consumers do (at
// id 0), so nothing is missed. Each script is sent whole (EVAL): a pipeline cannot fall back from
// EVALSHA after a Redis restart forgot the script, and the script is a few hundred bytes.
func (t *Transport) Publish(ctx context.Context, msgs []transport.Wakeup) map[int64]error {
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, t.opts.PublishTimeout)
	defer cancel()
	cmds := make([]*redis.Cmd, len(msgs))
	_, pipeErr := t.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range msgs {
			cmds[i] = publishScript.Eval(ctx, p, []string{t.stream(m.Queue), t.ids(m.Queue)}, m.TaskID, m.Queue)
		}
		return nil
	})
	// A failure other than a command's own (the connection, the deadline) fails every message,
	// whatever state go-redis left the commands in: a false failure only means a duplicate.
	_, cmdErr := errors.AsType[redis.Error](pipeErr)
	batchFailed := pipeErr != nil && !cmdErr
	var failed map[int64]error
	for i, m := range msgs {
		err := cmds[i].Err()
		if err == nil && batchFailed {
			err = pipeErr
		}
		if err != nil {
			if failed == nil {
				failed = make(map[int64]error)
			}
			failed[m.ID] = fmt.Errorf("redis: publish: task %s to queue %q: %w", m.TaskID, m.Queue, err)
		}
	}
	return failed
}

// Outstanding implements transport.Transport. Ack deletes entries, so the stream's length is
// the number of wake-ups published and not yet acknowledged.
func (t *Transport) Outstanding(ctx context.Context, queue string) (int, error) {
	n, err := t.client.XLen(ctx, t.stream(queue)).Result()
	if err != nil {
		return 0, fmt.Errorf("redis: outstanding of queue %q: %w", queue, err)
	}
	return int(n), nil
}

// Reclaim implements transport.Transport: it moves wake-ups idle for minIdle to the consumer
// "baton-reconciler" with XAUTOCLAIM, stream by stream.
func (t *Transport) Reclaim(ctx context.Context, minIdle time.Duration, max int) ([]transport.Delivery, error) {
	var (
		ds     []transport.Delivery
		cursor uint64
		seen   = make(map[string]bool) // SCAN may return a key twice
	)
	// Queue names may hold glob metacharacters, so the pattern is built from the prefix only.
	match := escapeGlob(t.keys) + "*"
	for len(ds) < max {
		keys, next, err := t.client.ScanType(ctx, cursor, match, 100, "stream").Result()
		if err != nil {
			return ds, fmt.Errorf("redis: reclaim: scan: %w", err)
		}
		for _, key := range keys {
			if seen[key] || len(ds) >= max {
				continue
			}
			seen[key] = true
			got, err := t.reclaimStream(ctx, key, minIdle, max-len(ds))
			ds = append(ds, got...)
			if err != nil {
				return ds, err
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	return ds, nil
}

func (t *Transport) reclaimStream(ctx context.Context, stream string, minIdle time.Duration, max int) ([]transport.Delivery, error) {
	queue := strings.TrimPrefix(stream, t.keys)
	var ds []transport.Delivery
	start := "0-0"
	for len(ds) < max {
		msgs, next, err := t.client.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream:   stream,
			Group:    t.opts.Group,
			Consumer: reclaimer,
			MinIdle:  minIdle,
			Start:    start,
			Count:    int64(max - len(ds)),
		}).Result()
		if isNoGroup(err) {
			return ds, nil // no consumer ever read it: nothing was delivered
		}
		if err != nil {
			return ds, fmt.Errorf("redis: reclaim from queue %q: %w", queue, err)
		}
		ds = append(ds, t.deliveries(ctx, queue, msgs, reclaimer)...)
		if next == "0-0" {
			break
		}
		start = next
	}
	return ds, nil
}

// NewConsumer implements transport.Transport. The consumer shares the transport's client.
func (t *Transport) NewConsumer(name string) transport.Consumer {
	return &consumer{t: t, name: name}
}

// Close closes the client, which the transport's consumers share.
func (t *Transport) Close() error {
	if err := t.client.Close(); err != nil {
		return fmt.Errorf("redis: close: %w", err)
	}
	return nil
}

// createGroup creates the consumer group of stream (and the stream) if missing. Id 0, not $,
// so entries added before the group existed are delivered too.
func (t *Transport) createGroup(ctx context.Context, stream string) error {
	err := t.client.XGroupCreateMkStream(ctx, stream, t.opts.Group, "0").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("create group %s on %s: %w", t.opts.Group, stream, err)
	}
	return nil
}

// deliveries turns stream entries delivered to consumer into deliveries. An entry without a
// task id (not written by Publish, or deleted under an old server's XAUTOCLAIM) can never be
// acted on, so it is dropped from the stream rather than left outstanding forever.
func (t *Transport) deliveries(ctx context.Context, queue string, msgs []redis.XMessage, consumer string) []transport.Delivery {
	ds := make([]transport.Delivery, 0, len(msgs))
	for _, m := range msgs {
		d := &delivery{t: t, queue: queue, id: m.ID, consumer: consumer}
		taskID, ok := m.Values["task_id"].(string)
		if !ok {
			_ = d.Ack(ctx) // best effort: Reclaim retries it otherwise
			continue
		}
		d.taskID = taskID
		ds = append(ds, d)
	}
	return ds
}

// delivery is one stream entry delivered to consumer.
type delivery struct {
	t        *Transport
	queue    string
	id       string // the entry's id
	taskID   string
	consumer string
}

func (d *delivery) TaskID() string { return d.taskID }
func (d *delivery) Queue() string  { return d.queue }

// Ack acks and deletes the entry in one script, so no crash leaves a delivered entry that is
// neither pending nor gone (counted outstanding forever, never redelivered). An entry, group or
// stream that no longer exists has nothing left to settle.
func (d *delivery) Ack(ctx context.Context) error {
	if err := d.t.settle(ctx, d.queue, d.taskID, d.id); err != nil {
		return fmt.Errorf("redis: ack task %s of queue %q: %w", d.taskID, d.queue, err)
	}
	return nil
}

// settle acknowledges and deletes entry id of queue's stream, and forgets it as taskID's latest.
func (t *Transport) settle(ctx context.Context, queue, taskID, id string) error {
	return settleScript.Run(ctx, t.client, []string{t.stream(queue), t.ids(queue)}, t.opts.Group, id, taskID).Err()
}

// MessageIDs implements transport.MessageIDs: the entry ids of the latest outstanding wake-ups
// of the tasks of queue, by task id; a task with none is left out.
func (t *Transport) MessageIDs(ctx context.Context, queue string, taskIDs []string) (map[string]string, error) {
	if len(taskIDs) == 0 {
		return nil, nil
	}
	vals, err := t.client.HMGet(ctx, t.ids(queue), taskIDs...).Result()
	if err != nil {
		return nil, fmt.Errorf("redis: message ids of queue %q: %w", queue, err)
	}
	out := make(map[string]string, len(vals))
	for i, v := range vals {
		if id, ok := v.(string); ok {
			out[taskIDs[i]] = id
		}
	}
	return out, nil
}

// Settle implements transport.MessageIDs: one pipeline settles the wake-ups of refs on behalf
// of workers that were handed them and whose outcomes are now committed. An id that is not a
// stream entry id is skipped; a wake-up that is no longer there (settled, flushed) is not an error.
func (t *Transport) Settle(ctx context.Context, refs []transport.WakeupRef) error {
	cmds := make([]*redis.Cmd, 0, len(refs))
	_, err := t.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, r := range refs {
			if _, _, err := parseEntryID(r.ID); err == nil {
				cmds = append(cmds, settleScript.Eval(ctx, p, []string{t.stream(r.Queue), t.ids(r.Queue)}, t.opts.Group, r.ID, r.TaskID))
			}
		}
		return nil
	})
	if err == nil {
		for _, c := range cmds {
			if err = c.Err(); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("redis: settle %d wake-ups: %w", len(cmds), err)
	}
	return nil
}

// parseEntryID splits a stream entry id "<ms>-<seq>".
func parseEntryID(id string) (ms, seq uint64, err error) {
	a, b, ok := strings.Cut(id, "-")
	if ok {
		if ms, err = strconv.ParseUint(a, 10, 64); err == nil {
			seq, err = strconv.ParseUint(b, 10, 64)
		}
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("not a stream entry id: %q", id)
	}
	return ms, seq, nil
}

// InProgress resets the entry's idle time by claiming it again for the same consumer, so
// Reclaim's minimum idle time is counted from the last heartbeat. JUSTID leaves the delivery
// count alone, and an entry that is no longer pending (acknowledged, flushed) is not claimed.
func (d *delivery) InProgress(ctx context.Context) error {
	err := d.t.client.XClaimJustID(ctx, &redis.XClaimArgs{
		Stream:   d.t.stream(d.queue),
		Group:    d.t.opts.Group,
		Consumer: d.consumer,
		MinIdle:  0,
		Messages: []string{d.id},
	}).Err()
	if err != nil && !errors.Is(err, redis.Nil) && !isNoGroup(err) {
		return fmt.Errorf("redis: in progress task %s of queue %q: %w", d.taskID, d.queue, err)
	}
	return nil
}

// isNoGroup reports Redis's answer for a stream or consumer group that does not exist.
func isNoGroup(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// escapeGlob escapes s for a Redis glob pattern, matching itself only.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\*?[]`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
