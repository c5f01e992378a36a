package main

import (
	"bytes"
	"flag"
	"io"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/maintenance"
)

func TestRetentionFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		want    maintenance.RetentionConfig
		wantErr string // a part of the error; "" for none
	}{
		{nil, maintenance.RetentionConfig{Retention: 720 * time.Hour, DeadLetterRetention: 2160 * time.Hour}, ""},
		{[]string{"--retention=0"}, maintenance.RetentionConfig{DeadLetterRetention: 2160 * time.Hour}, ""},
		{[]string{"--retention=24h", "--retention-tenant", "acme=0", "--retention-tenant=big=8760h", "--dead-letter-retention=0"},
			maintenance.RetentionConfig{Retention: 24 * time.Hour, Tenants: map[string]time.Duration{"acme": 0, "big": 8760 * time.Hour}}, ""},
		{[]string{"--retention=-1h"}, maintenance.RetentionConfig{}, "--retention -1h0m0s"},
		{[]string{"--dead-letter-retention=-1s"}, maintenance.RetentionConfig{}, "--dead-letter-retention -1s"},
		{[]string{"--retention=100h", "--dead-letter-retention=10h"}, maintenance.RetentionConfig{}, "is below --retention"},
		{[]string{"--retention-tenant=acme"}, maintenance.RetentionConfig{}, "want TENANT=DURATION"},
		{[]string{"--retention-tenant==1h"}, maintenance.RetentionConfig{}, "want TENANT=DURATION"},
		{[]string{"--retention-tenant=acme="}, maintenance.RetentionConfig{}, "want TENANT=DURATION"},
		{[]string{"--retention-tenant=acme=soon"}, maintenance.RetentionConfig{}, "is not a duration"},
		{[]string{"--retention-tenant=acme=-2h"}, maintenance.RetentionConfig{}, "negative duration"},
		{[]string{"--retention-tenant=acme=1h", "--retention-tenant=acme=2h"}, maintenance.RetentionConfig{}, `tenant "acme" given twice`},
		{[]string{"--staging-retention=-1s"}, maintenance.RetentionConfig{}, "--staging-retention -1s"},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f retentionFlags
		f.register(fs)
		err := fs.Parse(tc.args)
		if err == nil {
			err = f.check()
		}
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want one saying %q", tc.args, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.args, err)
		default:
			got := f.config()
			if got.Retention != tc.want.Retention || got.DeadLetterRetention != tc.want.DeadLetterRetention ||
				!maps.Equal(got.Tenants, tc.want.Tenants) {
				t.Errorf("%q: config %+v, want %+v", tc.args, got, tc.want)
			}
		}
	}
}

// TestRetentionFlagsAreUsageErrors: both servers refuse bad retention flags with exit code 2 and a
// message, before they open anything.
func TestRetentionFlagsAreUsageErrors(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"dev", "server"} {
		for _, bad := range [][]string{{"--retention=-5m"}, {"--retention-tenant=acme"}, {"--retention-tenant=a=1h", "--retention-tenant=a=1h"},
			{"--retention=2h", "--dead-letter-retention=1h"}, {"--staging-retention=-1h"}} {
			args := append([]string{cmd, "--data-dir", filepath.Join(t.TempDir(), "d"), "--metrics-listen="}, bad...)
			if cmd == "server" {
				args = append([]string{cmd, "--metrics-listen="}, bad...)
			}
			var stdout, stderr bytes.Buffer
			if code := run(t.Context(), args, &stdout, &stderr); code != 2 {
				t.Errorf("baton %s %q: exit %d, want 2 (stderr %s)", cmd, bad, code, stderr.String())
			}
			if !strings.Contains(stderr.String(), "retention") {
				t.Errorf("baton %s %q: stderr %q does not say what is wrong", cmd, bad, stderr.String())
			}
		}
	}
}

// --staging-retention is 7 days unless set; 0 keeps every staging folder.
func TestStagingRetentionFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 7 * 24 * time.Hour},
		{[]string{"--staging-retention=0"}, 0},
		{[]string{"--staging-retention=36h"}, 36 * time.Hour},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var f retentionFlags
		f.register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := f.check(); err != nil {
			t.Errorf("%q: %v", tc.args, err)
		}
		if got := f.stagingConfig().Retention; got != tc.want {
			t.Errorf("%q: staging retention %s, want %s", tc.args, got, tc.want)
		}
	}
}
