package natsq

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/baton-dev/baton/internal/transport"
)

// Consumer receives wake-ups from the queues' durable consumers. It is used by one goroutine at
// a time.
type Consumer struct {
	t *Transport
}

var _ transport.Consumer = (*Consumer)(nil)

// Receive first takes what is already available, queue by queue in order, without waiting.
// Only if that finds nothing and wait > 0 does it wait on all the queues at once, with one pull
// request for a single message per queue, and return as soon as any queue yields. A pull request
// asks for one message so that it completes, on the server too, the moment one arrives: a larger
// batch would keep the request open for the full wait. The caller's next Receive collects the
// rest of a burst in its first pass. Whatever the wait yields beyond max is negatively
// acknowledged, for prompt redelivery.
func (c *Consumer) Receive(ctx context.Context, queues []string, max int, wait time.Duration) ([]transport.Delivery, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, q := range queues {
		if err := checkQueue(q); err != nil {
			return nil, fmt.Errorf("nats: receive: %w", err)
		}
	}
	if max <= 0 || len(queues) == 0 {
		return nil, sleep(ctx, wait)
	}

	var got []*delivery
	for _, q := range queues {
		ds, err := c.t.pull(ctx, q, max-len(got), false)
		got = append(got, ds...)
		if err != nil {
			nakAll(got)
			return nil, err
		}
		if len(got) >= max {
			break
		}
	}
	if len(got) == 0 && wait > 0 {
		var err error
		if got, err = c.waitAny(ctx, queues, wait); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		nakAll(got)
		return nil, err
	}
	if len(got) > max {
		nakAll(got[max:])
		got = got[:max]
	}
	if len(got) == 0 {
		return nil, nil
	}
	out := make([]transport.Delivery, len(got))
	for i, d := range got {
		out[i] = d
	}
	return out, nil
}

// waitAny waits up to wait for a wake-up on any of queues and returns what arrived, in queue
// order. An error is returned only if nothing arrived.
func (c *Consumer) waitAny(ctx context.Context, queues []string, wait time.Duration) ([]*delivery, error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	results := make([][]*delivery, len(queues))
	errs := make([]error, len(queues))
	var wg sync.WaitGroup
	for i, q := range queues {
		wg.Go(func() {
			results[i], errs[i] = c.t.pull(wctx, q, 1, true)
			if len(results[i]) > 0 {
				cancel() // ends the other queues' pull requests
			}
		})
	}
	wg.Wait()
	var got []*delivery
	for _, ds := range results {
		got = append(got, ds...)
	}
	if len(got) > 0 {
		return got, nil
	}
	return nil, errors.Join(errs...)
}

// A pull request to a consumer that no longer exists (its stream was deleted, say) gets no
// answer at all, not even "no responders": the server's JetStream API takes in every request
// and drops this one. It looks like an empty queue, so pull watches for silence instead:
//   - a live consumer answers a no-wait pull within a round trip, while FetchNoWait gives up
//     after 1 s without one; an empty no-wait pull that took noAnswer or longer is suspect;
//   - a waiting pull asks for idle heartbeats, which a missing consumer never sends
//     (jetstream.ErrNoHeartbeat).
//
// A suspect consumer is recreated (CreateOrUpdateConsumer is idempotent, so a false alarm
// costs one request).
const (
	noAnswer     = 500 * time.Millisecond
	minHeartbeat = 10 * time.Millisecond
	maxHeartbeat = 5 * time.Second
)

// pull fetches up to n wake-ups of queue: with block, waiting until ctx ends for at least one;
// without, only those available now. When the consumer turns out to be missing, it recreates it
// (and the stream) and tries again, once. It returns no error when ctx has ended.
func (t *Transport) pull(ctx context.Context, queue string, n int, block bool) ([]*delivery, error) {
	for attempt := 0; ; attempt++ {
		cons, err := t.consumer(ctx, queue)
		if err != nil {
			if ended(ctx) {
				return nil, nil
			}
			return nil, fmt.Errorf("nats: receive: %w", err)
		}
		start := time.Now()
		batch, err := fetch(ctx, cons, n, block)
		if err != nil {
			if ended(ctx) {
				return nil, nil
			}
			return nil, fmt.Errorf("nats: receive from queue %q: %w", queue, err)
		}
		var ds []*delivery
		for m := range batch.Messages() {
			if d := newDelivery(queue, m); d != nil {
				ds = append(ds, d)
			}
		}
		err = batch.Error()
		missing := isGone(err) || errors.Is(err, jetstream.ErrNoHeartbeat) ||
			(!block && err == nil && len(ds) == 0 && time.Since(start) >= noAnswer)
		switch {
		case ended(ctx):
			return ds, nil
		case missing:
			t.forgetConsumer(queue)
			if len(ds) > 0 {
				return ds, nil
			}
			if attempt > 0 {
				return nil, fmt.Errorf("nats: receive from queue %q: consumer %s does not answer: %w",
					queue, consumerName(queue), cmp.Or(err, errNoAnswer))
			}
			// The next attempt recreates the consumer, and the stream if needed.
		case err != nil:
			return ds, fmt.Errorf("nats: receive from queue %q: %w", queue, err)
		default:
			return ds, nil
		}
	}
}

var errNoAnswer = errors.New("no answer to a pull request")

func fetch(ctx context.Context, cons jetstream.Consumer, n int, block bool) (jetstream.MessageBatch, error) {
	if !block {
		return cons.FetchNoWait(n)
	}
	// FetchContext derives the pull request's expiry from ctx's deadline, and ends the request
	// client-side when ctx is cancelled. The heartbeat must be at most half the expiry.
	opts := []jetstream.FetchOpt{jetstream.FetchContext(ctx)}
	if d, ok := ctx.Deadline(); ok {
		if hb := min(time.Until(d)/4, maxHeartbeat); hb >= minHeartbeat {
			opts = append(opts, jetstream.FetchHeartbeat(hb))
		}
	}
	return cons.Fetch(n, opts...)
}

// ended reports whether ctx is done or past its deadline (whose timer may not have fired yet).
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close does nothing: the consumer holds no resources of its own.
func (c *Consumer) Close() error { return nil }

// delivery is a received wake-up.
type delivery struct {
	msg    jetstream.Msg
	queue  string
	taskID string
}

var _ transport.Delivery = (*delivery)(nil)

// newDelivery decodes m. A message that is no wake-up, published on the stream by someone else,
// is acknowledged so that it stops coming back, and yields nil.
func newDelivery(queue string, m jetstream.Msg) *delivery {
	var body wakeBody
	if err := json.Unmarshal(m.Data(), &body); err != nil || body.TaskID == "" {
		_ = m.Ack()
		return nil
	}
	return &delivery{msg: m, queue: queue, taskID: body.TaskID}
}

func nakAll(ds []*delivery) {
	for _, d := range ds {
		// A lost Nak only delays redelivery until the ack wait passes.
		_ = d.msg.Nak()
	}
}

func (d *delivery) TaskID() string { return d.taskID }
func (d *delivery) Queue() string  { return d.queue }

// Ack acknowledges the wake-up and waits for the server's confirmation, so that Outstanding no
// longer counts it once Ack returns. A message already acknowledged, or whose stream or consumer
// is gone, needs nothing more.
func (d *delivery) Ack(ctx context.Context) error {
	err := d.msg.DoubleAck(ctx)
	if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) || isGone(err) {
		return nil
	}
	return fmt.Errorf("nats: ack task %s: %w", d.taskID, err)
}

// InProgress resets the message's ack wait. It is a fire-and-forget publish: if the message is
// gone, there is nothing to postpone.
func (d *delivery) InProgress(context.Context) error {
	err := d.msg.InProgress()
	if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) || isGone(err) {
		return nil
	}
	return fmt.Errorf("nats: in progress for task %s: %w", d.taskID, err)
}
