package ctl

import (
	"testing"

	"github.com/baton-dev/baton/client"
)

func TestJobProgressLine_FillsTheBarByState(t *testing.T) {
	t.Parallel()
	line := jobProgressLine(&client.Job{Progress: map[string]int{"completed": 1, "failed": 1, "processing": 1, "waiting": 3}})
	want := "[=====xxxxx>>>>>               ] 2/6 done: waiting 3, processing 1, completed 1, failed 1"
	if line != want {
		t.Errorf("got  %q\nwant %q", line, want)
	}
}
