package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/specs"
	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/report"
	"github.com/baton-dev/baton/internal/service"
	"github.com/baton-dev/baton/internal/store"
)

// Controller runs the tasks of dispatcher-runtime pipeline jobs inside the server: control jobs
// such as a cron trigger, whose task does nothing but announce its tick. Each task emits one
// cursor event on every output of its job — the cursor is the trigger's time in Unix seconds (a
// cron tick's scheduled time, else when the task runs) — and completes, through the same claim
// and completion as any worker's task. Every replica runs a Controller.
type Controller struct {
	dp       *Plane
	workerID string
	service.Loop
}

// NewController returns a stopped controller that claims as workerID.
func (dp *Plane) NewController(workerID string) *Controller {
	return &Controller{dp: dp, workerID: workerID}
}

// Start runs the controller until Stop or until ctx ends.
func (c *Controller) Start(ctx context.Context) error { return c.Run(ctx, c.run) }

func (c *Controller) run(ctx context.Context) {
	for ctx.Err() == nil {
		claims, err := c.dp.d.ClaimWait(ctx, dispatch.ClaimNextParams{Queues: []string{specs.ControlQueue}, WorkerID: c.workerID, Limit: 16}, 30*time.Second)
		if err == nil {
			err = c.runClaims(ctx, claims)
		}
		if err != nil && ctx.Err() == nil {
			c.dp.log.Log(ctx, slog.LevelWarn, "control task failed; its lease will expire and it is retried", "err", err)
			select {
			case <-ctx.Done():
			case <-c.dp.clock.After(time.Second):
			}
		}
	}
}

// RunOnce runs the control tasks that are ready now and returns how many it completed.
func (c *Controller) RunOnce(ctx context.Context) (int, error) {
	claims, err := c.dp.d.ClaimNext(ctx, dispatch.ClaimNextParams{Queues: []string{specs.ControlQueue}, WorkerID: c.workerID, Limit: 64})
	if err != nil {
		return 0, fmt.Errorf("claim control tasks: %w", err)
	}
	return len(claims), c.runClaims(ctx, claims)
}

func (c *Controller) runClaims(ctx context.Context, claims []*dispatch.Claim) error {
	var errs []error
	for _, cl := range claims {
		t := cl.Task
		_, err := c.dp.d.Complete(ctx, dispatch.CompleteParams{TaskID: t.ID, Attempt: t.Attempt, LeaseToken: t.LeaseToken,
			Outcome: store.OutcomeSucceeded, Output: json.RawMessage(`{}`), Events: controlEvents(t, c.dp.now())})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// controlEvents is what a control task emits: a cursor event on each output of its job.
func controlEvents(t *store.Task, now time.Time) []report.Event {
	r := dispatch.DecodeRoute(t)
	if r == nil {
		return nil
	}
	at := now
	var trigger struct {
		ScheduledAt time.Time `json:"scheduled_at"`
	}
	// Lenient on purpose: a manual or webhook source's trigger holds the caller's own members (its
	// scheduled_at may be anything), so only a readable time counts; otherwise the task's is used.
	if json.Unmarshal(r.Trigger, &trigger) == nil && !trigger.ScheduledAt.IsZero() {
		at = trigger.ScheduledAt
	}
	cursor := at.Unix()
	events := make([]report.Event, 0, len(r.Outputs))
	for _, o := range r.Outputs {
		events = append(events, report.Event{DatasetUUID: o.DatasetUUID, DatasetVersion: o.DatasetVersion, Cursor: &cursor})
	}
	return events
}
