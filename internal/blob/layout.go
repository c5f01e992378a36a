package blob

import "strconv"

// BufferPrefix is where batch artifacts live under the object storage root: a task's own prefix
// is BufferPrefix + "{dataset}/{task_id}/{attempt}/", {dataset} being the dataset's uuid or name.
// The server checks a published batch's location against it, and the sink again before it reads.
const BufferPrefix = "buffers/"

// BatchPrefix is the key prefix under which a task's attempt writes its batches for a dataset.
func BatchPrefix(dataset, taskID string, attempt int) string {
	return BufferPrefix + dataset + "/" + taskID + "/" + strconv.Itoa(attempt) + "/"
}
