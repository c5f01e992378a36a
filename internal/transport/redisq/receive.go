package redisq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-dev/baton/internal/transport"
)

// blockSlice caps one blocking read, so that a cancelled context ends Receive's wait within it:
// go-redis cannot interrupt a command that is waiting for its reply.
const blockSlice = time.Second

// deadlineMargin ends a blocking read this long before the context's deadline, so the server's
// empty reply arrives before the socket deadline go-redis derives from that context.
const deadlineMargin = 20 * time.Millisecond

// consumer is a member of the transport's consumer group.
type consumer struct {
	t    *Transport
	name string
}

// Receive implements transport.Consumer.
//
// Every entry XREADGROUP returns is claimed by this consumer, and over several streams it returns
// up to COUNT entries of each: a surplus beyond max could neither be returned nor handed back, and
// would sit pending until Reclaim. So Receive claims with one non-blocking XREADGROUP per queue,
// in priority order, each for what max leaves; and it waits with XREAD, which claims nothing, for
// entries newer than the streams' last ones as seen before those reads. When one arrives it reads
// again; another consumer may have taken it, and then it waits on.
func (c *consumer) Receive(ctx context.Context, queues []string, max int, wait time.Duration) ([]transport.Delivery, error) {
	if max < 1 {
		return nil, fmt.Errorf("redis: receive: max is %d, want at least 1", max)
	}
	if len(queues) == 0 {
		return nil, errors.New("redis: receive: no queues")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	queues = distinct(queues)
	end := time.Now().Add(wait)
	for {
		var since []string
		if wait > 0 {
			var err error
			if since, err = c.t.lastIDs(ctx, queues); err != nil {
				return nil, receiveErr(ctx, err)
			}
		}
		ds, err := c.claim(ctx, queues, max)
		if len(ds) > 0 {
			return ds, nil // an error after some were claimed recurs on the next call
		}
		if err != nil {
			return nil, receiveErr(ctx, err)
		}
		if wait <= 0 {
			return nil, nil
		}
		woke, err := c.await(ctx, queues, since, end)
		if err != nil || !woke {
			return nil, err
		}
	}
}

// Close does nothing: the consumer shares its transport's client, which Transport.Close closes.
// Wake-ups it received and never acknowledged stay pending in the group for Reclaim.
func (c *consumer) Close() error { return nil }

// claim reads up to max new entries, earlier queues first.
func (c *consumer) claim(ctx context.Context, queues []string, max int) ([]transport.Delivery, error) {
	var ds []transport.Delivery
	for _, q := range queues {
		if len(ds) >= max {
			break
		}
		got, err := c.readGroup(ctx, q, max-len(ds))
		ds = append(ds, got...)
		if err != nil {
			return ds, err
		}
	}
	return ds, nil
}

// readGroup reads up to n new entries of queue without blocking, creating the group (and the
// stream) when the server has neither, as after a FLUSHALL or before the first publish.
func (c *consumer) readGroup(ctx context.Context, queue string, n int) ([]transport.Delivery, error) {
	stream := c.t.stream(queue)
	args := &redis.XReadGroupArgs{
		Group:    c.t.opts.Group,
		Consumer: c.name,
		Streams:  []string{stream, ">"},
		Count:    int64(n),
		Block:    -1, // go-redis sends BLOCK for any Block >= 0, and BLOCK 0 waits forever
	}
	res, err := c.t.client.XReadGroup(ctx, args).Result()
	if isNoGroup(err) {
		if err = c.t.createGroup(ctx, stream); err == nil {
			res, err = c.t.client.XReadGroup(ctx, args).Result()
		}
	}
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read queue %q: %w", queue, err)
	}
	var ds []transport.Delivery
	for _, s := range res {
		ds = append(ds, c.t.deliveries(ctx, queue, s.Messages, c.name)...)
	}
	return ds, nil
}

// await waits, until end, for an entry newer than since in any of the queues' streams, and
// reports whether one came. It blocks at most blockSlice at a time to notice cancellation.
func (c *consumer) await(ctx context.Context, queues, since []string, end time.Time) (bool, error) {
	args := make([]string, 0, 2*len(queues))
	for _, q := range queues {
		args = append(args, c.t.stream(q))
	}
	args = append(args, since...)
	for {
		block := min(time.Until(end), blockSlice)
		if dl, ok := ctx.Deadline(); ok {
			block = min(block, time.Until(dl)-deadlineMargin)
		}
		if block < time.Millisecond { // BLOCK 0 would wait forever
			return false, nil
		}
		err := c.t.client.XRead(ctx, &redis.XReadArgs{Streams: args, Count: 1, Block: block}).Err()
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, redis.Nil) {
			return false, receiveErr(ctx, fmt.Errorf("wait: %w", err))
		}
		if err := ctx.Err(); err != nil {
			return false, err
		}
	}
}

// lastIDs returns the id of the last entry of each queue's stream, "0-0" for an empty or
// missing stream: every entry added later has a greater id.
func (t *Transport) lastIDs(ctx context.Context, queues []string) ([]string, error) {
	cmds := make([]*redis.XMessageSliceCmd, len(queues))
	_, err := t.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range queues {
			cmds[i] = p.XRevRangeN(ctx, t.stream(q), "+", "-", 1)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("last ids: %w", err)
	}
	ids := make([]string, len(queues))
	for i, cmd := range cmds {
		ids[i] = "0-0"
		if msgs := cmd.Val(); len(msgs) > 0 {
			ids[i] = msgs[0].ID
		}
	}
	return ids, nil
}

// receiveErr is Receive's error for err: the context's own error once it is done, as the
// transport.Consumer contract asks, and err with context otherwise.
func receiveErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded // the socket deadline fired before the context's timer
	}
	return fmt.Errorf("redis: receive: %w", err)
}

// distinct returns queues without repeats, in their first order.
func distinct(queues []string) []string {
	seen := make(map[string]bool, len(queues))
	out := make([]string, 0, len(queues))
	for _, q := range queues {
		if !seen[q] {
			seen[q] = true
			out = append(out, q)
		}
	}
	return out
}
