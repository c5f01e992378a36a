// Package lifecycle holds Baton's task and job rules as pure functions: the states, which error
// categories are retried, the backoff, the job status, and DAG validation. It does no I/O; the
// dispatcher loads state, asks these functions, and writes the answer in one transaction.
//
// The task state table (docs/lifecycle.md#states):
//
//	waiting  ──last parent completed──▶ pending
//	pending  ──claim (attempt+1, new lease)──▶ running
//	running  ──succeeded──▶ completed
//	running  ──failed / lease expired / deadline, retry allowed──▶ pending (available_at = now+backoff)
//	running  ──failed / timed out, no retry left or not retryable──▶ failed (dead-lettered)
//	running  ──reported cancelled──▶ canceled
//	running  ──cancel requested, grace elapsed──▶ failed (CANCEL_TIMEOUT)
//	waiting, pending ──cancel──▶ canceled
//	waiting, pending ──a parent failed, was canceled or skipped──▶ skipped
//	failed, canceled, skipped ──resume──▶ waiting or pending (fresh retry budget)
package lifecycle
