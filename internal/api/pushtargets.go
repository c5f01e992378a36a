package api

import (
	"fmt"

	"github.com/baton-dev/baton/internal/dispatch"
	"github.com/baton-dev/baton/internal/lifecycle"
)

// checkPushTargets refuses, at submission, push tasks whose name has no target (when the server
// knows its targets), in the shape of the DAG validation errors. A task with no name is left to
// the DAG validator. Delivery itself is internal/push's.
func (s *Server) checkPushTargets(tasks []lifecycle.TaskSpec) error {
	if s.pushTargets == nil {
		return nil
	}
	var errs []string
	for _, t := range tasks {
		if t.Runtime != "push" || t.Name == "" {
			continue
		}
		if _, ok := s.pushTargets[t.Name]; !ok {
			errs = append(errs, fmt.Sprintf("Task %s: no push target for task name %q (baton server --push-target %s=URL)", t.Key, t.Name, t.Name))
		}
	}
	if len(errs) > 0 {
		return &dispatch.ValidationError{Errors: errs}
	}
	return nil
}
