package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/baton-dev/baton/internal/cmdline"
	"github.com/baton-dev/baton/internal/ctl"
)

// buildInfo is what `baton version` prints.
type buildInfo struct {
	Version    string `json:"version"`
	Commit     string `json:"commit,omitempty"` // "-dirty" appended when the tree had changes
	CommitTime string `json:"commit_time,omitempty"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
}

// buildInfoFrom is what info, the build information the Go toolchain recorded in the binary
// (nil: none), says: the module version (a tag, a pseudo-version or "(devel)") unless ldflags,
// the -ldflags main.version, is set, and the VCS commit and time, which `go build` and `go run`
// record in a git checkout (`go test` does not).
func buildInfoFrom(info *debug.BuildInfo, ldflags string) buildInfo {
	b := buildInfo{Version: ldflags, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info == nil {
		return b
	}
	if ldflags == "dev" && info.Main.Version != "" {
		b.Version = info.Main.Version
	}
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.CommitTime = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Commit != "" {
		b.Commit += "-dirty"
	}
	return b
}

// runVersion is `baton version [-o json|yaml]`.
func runVersion(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("baton version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := ctl.RegisterOutput(fs)
	if code, ok := cmdline.ParseFlags(ctx, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "baton version: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	info, _ := debug.ReadBuildInfo()
	b := buildInfoFrom(info, version)
	err := ctl.WriteOutput(stdout, *out, b, func() error {
		_, err := fmt.Fprintf(stdout, "baton %s\n  commit  %s\n  time    %s\n  go      %s %s\n",
			b.Version, orUnknown(b.Commit), orUnknown(b.CommitTime), b.Go, b.Platform)
		return err
	})
	if err != nil {
		fmt.Fprintln(stderr, "baton version:", err)
		return 1
	}
	return 0
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown (the build recorded no VCS information)"
	}
	return s
}
