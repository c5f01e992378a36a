// Entry point of the contract suite: the table of every aggregate's behaviours.

package storetest

import (
	"testing"

	"github.com/baton-dev/baton/internal/store"
)

// Run is the contract suite every store driver must pass unchanged. Each behaviour is a parallel
// subtest on a fresh store from open.
func Run(t *testing.T, open func(t testing.TB) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, st store.Store)
	}{
		// Jobs (jobs.go): round trips, lookups, idempotency keys, listing, cursors, job updates.
		{"JobRoundTrip", testJobRoundTrip},
		{"UnknownIDsAreNotFound", testUnknownIDsAreNotFound},
		{"IdempotencyKeyConflictPerTenant", testIdempotencyKeyConflictPerTenant},
		{"JobByIdempotencyKey", testJobByIdempotencyKey},
		{"ListJobsNewestFirstWithPaging", testListJobsNewestFirstWithPaging},
		{"ListJobsStatusFilter", testListJobsStatusFilter},
		{"ListJobsTenantIsolation", testListJobsTenantIsolation},
		{"CursorsAreInt64", testCursorsAreInt64},
		{"AddUnfinished", testAddUnfinished},
		{"UpdateJobWritesMutableFields", testUpdateJobWritesMutableFields},
		{"UpdateJobUnknownIsNotFound", testUpdateJobUnknownIsNotFound},
		{"JobLockMany", testJobLockMany},
		{"UpdateJobManyWritesMutableFields", testUpdateJobManyWritesMutableFields},

		// Bundles (bundles.go): user code bundles' records.
		{"BundleRoundTripAndTenants", testBundleRoundTripAndTenants},
		{"BundleListNewestFirstWithPaging", testBundleListNewestFirstWithPaging},
		{"BundleFinalizeOnce", testBundleFinalizeOnce},
		{"BundleDisableKeepsTheFirst", testBundleDisableKeepsTheFirst},
		// Workers (bundles.go): what workers say of themselves.
		{"WorkerInfoPutReplaces", testWorkerInfoPutReplaces},

		// Tasks (tasks.go): task rows, dependencies and results, updates, release and skip.
		{"TaskRoundTrip", testTaskRoundTrip},
		{"JobTasksInInsertionOrder", testJobTasksInInsertionOrder},
		{"JobTasksWithResults", testJobTasksWithResults},
		{"TaskJobsNotCompleted", testTaskJobsNotCompleted},
		{"ParentOutputs", testParentOutputs},
		{"UpdateTaskWritesMutableFields", testUpdateTaskWritesMutableFields},
		{"ReleaseChildrenWaitsForEveryParent", testReleaseChildrenWaitsForEveryParent},
		{"ReleaseChildrenLeavesCanceledChild", testReleaseChildrenLeavesCanceledChild},
		{"SkipDescendants", testSkipDescendants},
		{"BulkInsertTasksAndDeps", testBulkInsertTasksAndDeps},

		// Claims (claims.go): ready ids, claiming, leases, fences, batches, the reaper's due tasks.
		{"ReadyTaskIDsFilterAndOrder", testReadyTaskIDsFilterAndOrder},
		{"ReadyPushTasksWaitForATarget", testReadyPushTasksWaitForATarget},
		{"ClaimTaskTakesLease", testClaimTaskTakesLease},
		{"ClaimTaskNotClaimable", testClaimTaskNotClaimable},
		{"ClaimTaskRaceHasOneWinner", testClaimTaskRaceHasOneWinner},
		{"ClaimAndCompleteTasksInBatches", testClaimAndCompleteTasksInBatches},
		{"TraceparentSurvivesInsertAndClaim", testTraceparentSurvivesInsertAndClaim},
		{"UpdateTaskStaleFenceIsLeaseLost", testUpdateTaskStaleFenceIsLeaseLost},
		{"NextReapAtAndDueTasks", testNextReapAtAndDueTasks},

		// Cancellation and resume (cancel.go), and the dead letters a resume takes back.
		{"CancelIdleJob", testCancelIdleJob},
		{"CancelIdleTask", testCancelIdleTask},
		{"RequestCancelJob", testRequestCancelJob},
		{"RequestCancelTask", testRequestCancelTask},
		{"ResumeTasks", testResumeTasks},
		{"ListDeadLetters", testListDeadLetters},

		// The Query Service's audit trail (query.go).
		{"QueryAuditRoundTripNewestFirstPerTenant", testQueryAuditRoundTripNewestFirstPerTenant},
		{"RetentionDeletesExpiredQueryAudit", testRetentionDeletesExpiredQueryAudit},

		// Attempts (attempts.go).
		{"Attempts", testAttempts},
		{"PutAttemptsInsertsOrReplaces", testPutAttemptsInsertsOrReplaces},

		// Audit events (events.go).
		{"EventsBulkInsertAndList", testEventsBulkInsertAndList},
		{"ListTaskEvents", testListTaskEvents},

		// Outbox (outbox.go): messages, the relay's queries, unsent messages by key, the backlog.
		{"Outbox", testOutbox},
		{"OutboxRelayQueries", testOutboxRelayQueries},
		{"OutboxDelete", testOutboxDelete},
		{"OutboxUnsentByKey", testOutboxUnsentByKey},
		{"OutboxBacklog", testOutboxBacklog},

		// Transactions (transactions.go).
		{"InTxRollsBackOnError", testInTxRollsBackOnError},
		{"InTxCommitIsVisibleToReaders", testInTxCommitIsVisibleToReaders},

		// The metrics' counts (stats.go).
		{"JobCounts", testJobCounts},
		{"QueueStats", testQueueStats},
		{"TaskCounts", testTaskCounts},

		// Retention (retention.go).
		{"RetentionDeletesExpiredJobsOnly", testRetentionDeletesExpiredJobsOnly},
		{"RetentionResumedJobFollowsNormalRetention", testRetentionResumedJobFollowsNormalRetention},
		{"RetentionBatchLimit", testRetentionBatchLimit},
		{"RetentionKeepsLatestJobOfPipelineJob", testRetentionKeepsLatestJobOfPipelineJob},

		// Buffered publishes (buffer.go).
		{"ExtendBufferPublishIsFencedByTheReceipt", testExtendBufferPublishIsFencedByTheReceipt},
		{"InsertBufferPublishIsIdempotent", testInsertBufferPublishIsIdempotent},
		{"ClaimableBufferPublishesFilterAndOrder", testClaimableBufferPublishes},
		{"ClaimableBufferPublishesSkipsHeldRows", testClaimableBufferPublishesSkipsHeldRows},
		{"UpdateBufferPublishWritesQueueFields", testUpdateBufferPublishWritesQueueFields},
		{"ListBufferDeadLettersPaging", testListBufferDeadLetters},
		{"DiscardQueuedBufferPublishes", testDiscardQueuedBufferPublishes},

		// Pipelines (pipelines.go): pipelines, versions, consumers and the jobs they start.
		{"PutPipelineInsertsAndActivates", testPutPipelineInsertsAndActivates},
		{"ListPipelinesByTenant", testListPipelinesByTenant},
		{"PipelineVersions", testPipelineVersions},
		{"ConsumersFollowTheActiveVersion", testConsumersFollowTheActiveVersion},
		{"InsertJobsIfAbsent", testInsertJobsIfAbsent},
		{"PipelineJobQueries", testPipelineJobQueries},
		{"BuildRecords", testBuildRecords},
		{"OutputResetsRoundTripNewestFirst", testOutputResetsRoundTripNewestFirst},

		// Backpressure (backpressure.go): held routings and pipeline jobs' backlogs.
		{"HeldRoutingsReleaseInOrder", testHeldRoutingsReleaseInOrder},
		{"PipelineJobBacklog", testPipelineJobBacklog},

		// Datasets (datasets.go): datasets, their versions and events.
		{"DatasetLookups", testDatasetLookups},
		{"InsertDatasetsSkipsExistingProducers", testInsertDatasetsSkipsExistingProducers},
		{"DatasetNamesAreUniquePerTenant", testDatasetNamesAreUniquePerTenant},
		{"UpdateDatasetWritesItsFields", testUpdateDatasetWritesItsFields},
		{"ListDatasetsNamedFirst", testListDatasetsNamedFirst},
		{"DatasetVersions", testDatasetVersions},
		{"DatasetEvents", testDatasetEvents},
		{"DatasetEventsByVersionAfter", testDatasetEventsByVersionAfter},

		// Partition commits of replace outputs (partitions.go).
		{"PartitionCommitsKeepHistoryAndListTheCurrentOnes", testPartitionCommitsKeepHistoryAndListTheCurrentOnes},
		{"PartitionCommitAttemptsNameEveryCommittingAttempt", testPartitionCommitAttemptsNameEveryCommittingAttempt},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}
