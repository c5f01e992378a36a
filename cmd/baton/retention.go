package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/dataplane/staging"
	"github.com/baton-dev/baton/internal/maintenance"
)

// retentionFlags are --retention, --retention-tenant, --dead-letter-retention and
// --staging-retention.
type retentionFlags struct {
	retention, deadLetter time.Duration
	tenants               tenantRetentionFlag
	// staging is how old a replace output's uncommitted staging folder gets before it is deleted.
	staging time.Duration
}

func (f *retentionFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.retention, "retention", maintenance.DefaultRetention, "delete finished jobs (completed, partial_failure, canceled) with their tasks, attempts and events this long after they finished (0: keep them forever)")
	fs.Var(&f.tenants, "retention-tenant", "`TENANT=DURATION`: --retention for the jobs of TENANT (0: keep them forever; repeatable)")
	fs.DurationVar(&f.deadLetter, "dead-letter-retention", maintenance.DefaultDeadLetterRetention, "keep a finished job with a dead-lettered task this long after its dead letter, unless resumed (at least --retention; 0: until resumed)")
	fs.DurationVar(&f.staging, "staging-retention", staging.DefaultRetention, "with object storage: delete a replace job's staging folder that no partition commit names once all its objects are this old (0: keep them forever)")
}

// check reports a usage error in the flags.
func (f *retentionFlags) check() error {
	switch {
	case f.retention < 0:
		return fmt.Errorf("--retention %s: want a duration of 0 (keep forever) or more", f.retention)
	case f.deadLetter < 0:
		return fmt.Errorf("--dead-letter-retention %s: want a duration of 0 (keep until resumed) or more", f.deadLetter)
	case f.staging < 0:
		return fmt.Errorf("--staging-retention %s: want a duration of 0 (keep forever) or more", f.staging)
	case f.deadLetter > 0 && f.deadLetter < f.retention:
		return fmt.Errorf("--dead-letter-retention %s is below --retention %s: a dead letter keeps its job longer than others, never shorter (0: until resumed)", f.deadLetter, f.retention)
	}
	return nil
}

// config is the dispatcher's retention config of the flags.
func (f *retentionFlags) config() maintenance.RetentionConfig {
	return maintenance.RetentionConfig{Retention: f.retention, Tenants: f.tenants.m, DeadLetterRetention: f.deadLetter}
}

// stagingConfig is the staging collector's config of the flags.
func (f *retentionFlags) stagingConfig() staging.Config {
	return staging.Config{Retention: f.staging}
}

// tenantRetentionFlag is --retention-tenant TENANT=DURATION, checked as each is parsed.
type tenantRetentionFlag struct{ m map[string]time.Duration }

func (t *tenantRetentionFlag) String() string {
	if t == nil {
		return ""
	}
	return strings.Join(t.Values(), ",")
}

// Values makes the flag repeatable in a configuration file: one TENANT=DURATION a list item.
func (t *tenantRetentionFlag) Values() []string {
	parts := make([]string, 0, len(t.m))
	for _, k := range slices.Sorted(maps.Keys(t.m)) {
		parts = append(parts, k+"="+t.m[k].String())
	}
	return parts
}

func (t *tenantRetentionFlag) Set(v string) error {
	tenant, dur, ok := strings.Cut(v, "=")
	if !ok || tenant == "" || dur == "" {
		return errors.New("want TENANT=DURATION, e.g. acme=2160h (0: keep the tenant's jobs forever)")
	}
	d, err := time.ParseDuration(dur)
	if err != nil {
		return fmt.Errorf("tenant %q: %q is not a duration (e.g. 720h, 90m)", tenant, dur)
	}
	if d < 0 {
		return fmt.Errorf("tenant %q: negative duration %s", tenant, d)
	}
	if _, dup := t.m[tenant]; dup {
		return fmt.Errorf("tenant %q given twice", tenant)
	}
	if t.m == nil {
		t.m = map[string]time.Duration{}
	}
	t.m[tenant] = d
	return nil
}
