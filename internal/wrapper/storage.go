package wrapper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/runner"
	"github.com/baton-dev/baton/worker"
)

// awsFiles are the AWS shared credentials and config files of a child's work directory.
type awsFiles struct{ credentials, config string }

// write writes c to the files, each replaced atomically, readable by the child (whose work
// directory no one else can enter).
func (f awsFiles) write(c *worker.Credentials) error {
	creds := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\naws_session_token = %s\n",
		c.AccessKeyID, c.SecretAccessKey, c.SessionToken)
	conf := "[default]\nregion = " + c.Region + "\n"
	if c.EndpointURL != "" {
		// An S3-compatible server is addressed path-style (http://host/bucket/key).
		conf += "endpoint_url = " + c.EndpointURL + "\ns3 =\n    addressing_style = path\n"
	}
	if err := replaceFile(f.credentials, []byte(creds)); err != nil {
		return err
	}
	return replaceFile(f.config, []byte(conf))
}

// replaceFile writes data to a new file beside path and renames it over path.
func replaceFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".baton-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// keepCredentials renews a running child's credentials before they expire, for tasks that run
// longer than they last: the environment cannot change under a running process, so the new ones
// go to AWS_SHARED_CREDENTIALS_FILE, which SDKs read when no key is in the environment (and the
// CLI with --profile default). It stops when ctx ends.
func (w *Wrapper) keepCredentials(ctx context.Context, t *worker.Task, files awsFiles, c *worker.Credentials, log *slog.Logger) {
	for {
		// Renew when a quarter of their life is left; Task.Credentials mints below a third.
		timer := time.NewTimer(max(time.Until(c.Expiration)*3/4, time.Second))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		next, err := t.Credentials(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("could not renew the child's object storage credentials; retrying", "err", err, "expire", c.Expiration)
			continue // c is unchanged: the next try comes after three quarters of what is left
		case next != c:
			if err := files.write(next); err != nil {
				log.Warn("could not write the child's renewed credentials", "err", err)
				continue
			}
			log.Info("renewed the child's object storage credentials", "expire", next.Expiration)
		}
		c = next
	}
}

// maxBatchFile bounds a batch file a child leaves.
const maxBatchFile = 64 << 20

// publishBatches publishes the batches a successful child left in dir: NAME.jsonl for the buffered
// dataset NAME. Only regular files the child's user owns are read, never through a link, so a
// child cannot make the wrapper publish a file it could not read itself. Every NAME must be a
// buffered output of the task's job (its claim's outputs), as the server requires: otherwise
// nothing is uploaded or published, and the task fails for good.
func (w *Wrapper) publishBatches(ctx context.Context, t *worker.Task, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var outputs []string
	if t.Pipeline != nil {
		for _, o := range t.Pipeline.Outputs {
			if o.WriteMode == "buffered" {
				outputs = append(outputs, o.DatasetUUID, o.DatasetName)
			}
		}
	}
	for _, e := range entries {
		dataset, ok := strings.CutSuffix(e.Name(), ".jsonl")
		if !ok || !e.Type().IsRegular() || dataset == "" || slices.Contains(outputs, dataset) {
			continue
		}
		return worker.Permanent(fmt.Errorf("batch %s: dataset %q is not a buffered output of this task's job: only tasks of "+
			"the pipeline job that publishes a buffered dataset may publish batches into it; no batch was published", e.Name(), dataset))
	}
	for _, e := range entries {
		dataset, ok := strings.CutSuffix(e.Name(), ".jsonl")
		if !ok || !e.Type().IsRegular() || dataset == "" {
			continue
		}
		data, err := runner.ReadChildFile(filepath.Join(dir, e.Name()), w.cred, maxBatchFile)
		if err != nil {
			return worker.Errorf(worker.UserCode, "batch %s: %v", e.Name(), err)
		}
		b, err := t.PublishJSONL(ctx, dataset, data)
		if err != nil {
			var we *worker.Error
			if errors.As(err, &we) {
				return err
			}
			return fmt.Errorf("publish %s to dataset %q: %w", e.Name(), dataset, err)
		}
		w.log.Info("batch published", "task_id", t.ID, "dataset", dataset, "rows", b.Rows, "uri", b.URI, "duplicate", b.Duplicate)
	}
	return nil
}
