package grant_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/baton-dev/baton/internal/blob"
	"github.com/baton-dev/baton/internal/blob/blobtest"
	"github.com/baton-dev/baton/internal/grant"
)

// TestMintedCredentials mints credentials on the real S3-compatible server for a task that reads
// one input and writes one buffered output, and checks with them what S3 itself allows.
func TestMintedCredentials(t *testing.T) {
	ctx := context.Background()
	st, opts, m := newMinter(t)
	root := st.Root()
	bucket := st.S3().Bucket

	// Another task's output, which this task reads; another task's scratch, which it must not.
	must(t, st.Put(ctx, "datasets/in-uuid/t0/1/part-0.parquet", []byte("input"), "application/octet-stream"))
	must(t, st.Put(ctx, "scratch/t-other/1/secret.txt", []byte("not yours"), "text/plain"))

	ref, _ := json.Marshal(map[string]string{"scheme": "s3", "bucket": bucket,
		"prefix": strings.TrimPrefix(root, "s3://"+bucket+"/") + "datasets/in-uuid/t0/1/", "glob": "*.parquet"})
	g, skipped := grant.Derive(root, grant.Attempt{TaskID: "t1", Attempt: 1, Inputs: []grant.Input{{DatasetUUID: "in-uuid", StorageRef: ref}},
		Outputs: []grant.Output{{DatasetUUID: "alerts-uuid", Buffered: true}}})
	if len(skipped) != 0 || len(g.ReadPrefixes) != 1 {
		t.Fatalf("grant %+v, skipped %q", g, skipped)
	}
	until := time.Now().Add(time.Hour)
	creds, err := m.Mint(ctx, g, until, grant.Session("t1", 1))
	if err != nil {
		t.Fatal(err)
	}
	if creds.AccessKeyID == opts.AccessKey || creds.SessionToken == "" || creds.Endpoint != opts.Endpoint {
		t.Fatalf("minted %+v: want temporary credentials for %s", creds, opts.Endpoint)
	}
	if creds.Expiration.After(until) {
		t.Fatalf("credentials expire at %v, after the token (%v)", creds.Expiration, until)
	}
	c := clientFor(creds)
	key := func(rel string) string { return strings.TrimPrefix(root, "s3://"+bucket+"/") + rel }

	// Allowed: read the input, write and read back under its own prefixes, list them.
	if got := get(t, c, bucket, key("datasets/in-uuid/t0/1/part-0.parquet")); got != "input" {
		t.Fatalf("read the input: %q", got)
	}
	for _, k := range []string{"buffers/alerts-uuid/t1/1/batch-0001.jsonl", "scratch/t1/1/tmp.bin"} {
		if err := put(ctx, c, bucket, key(k)); err != nil {
			t.Fatalf("write %s under the task's own prefix: %v", k, err)
		}
	}
	if _, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(key("scratch/t1/1/"))}); err != nil {
		t.Fatalf("list the task's own prefix: %v", err)
	}

	// Refused with 403.
	forbidden(t, "read another task's prefix", func() error {
		_, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key("scratch/t-other/1/secret.txt"))})
		return err
	})
	forbidden(t, "write a read prefix", func() error { return put(ctx, c, bucket, key("datasets/in-uuid/t0/1/evil.parquet")) })
	forbidden(t, "write the next attempt's prefix", func() error { return put(ctx, c, bucket, key("scratch/t1/2/x")) })
	forbidden(t, "write a sibling prefix sharing the start", func() error { return put(ctx, c, bucket, key("scratch/t1/10/x")) })
	forbidden(t, "list the bucket root", func() error {
		_, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		return err
	})
	forbidden(t, "list the store's root", func() error {
		_, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(key(""))})
		return err
	})
	forbidden(t, "delete an input", func() error {
		_, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key("datasets/in-uuid/t0/1/part-0.parquet"))})
		return err
	})
	forbidden(t, "list all buckets", func() error {
		_, err := c.ListBuckets(ctx, &s3.ListBucketsInput{})
		return err
	})
}

// TestMintedCredentialsEndWithTheToken mints for a token with seconds to live: STS makes the
// session last 15 minutes at least, and the policy's time condition still ends it with the token.
func TestMintedCredentialsEndWithTheToken(t *testing.T) {
	ctx := context.Background()
	st, _, m := newMinter(t)
	g, _ := grant.Derive(st.Root(), grant.Attempt{TaskID: "t1", Attempt: 1})
	until := time.Now().Add(3 * time.Second).Truncate(time.Second)
	creds, err := m.Mint(ctx, g, until, grant.Session("t1", 1))
	if err != nil {
		t.Fatal(err)
	}
	if !creds.Expiration.Equal(until) {
		t.Fatalf("expiration %v, want the token's %v", creds.Expiration, until)
	}
	bucket := st.S3().Bucket
	key := strings.TrimPrefix(st.Root(), "s3://"+bucket+"/") + "scratch/t1/1/x"
	c := clientFor(creds)
	if err := put(ctx, c, bucket, key); err != nil {
		t.Fatalf("write before expiry: %v", err)
	}
	time.Sleep(time.Until(until) + 1500*time.Millisecond)
	forbidden(t, "write after the token expired", func() error { return put(ctx, c, bucket, key) })
	forbidden(t, "read after the token expired", func() error {
		_, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		return err
	})
	if _, err := m.Mint(ctx, g, until, grant.Session("t1", 1)); err == nil {
		t.Fatal("minted for an expired token")
	}
}

func TestNewMinterNeedsS3(t *testing.T) {
	st, err := blob.Open(context.Background(), blobtest.File(t), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grant.NewMinter(st, grant.MinterOptions{}); !errors.Is(err, grant.ErrNoS3) {
		t.Fatalf("NewMinter on a directory store: %v, want ErrNoS3", err)
	}
}

// newMinter opens a store in a bucket of its own on the test's S3 server, and a Minter for it.
func newMinter(t *testing.T) (*blob.Store, blob.Options, *grant.Minter) {
	t.Helper()
	url, opts := blobtest.S3(t)
	st, err := blob.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := grant.NewMinter(st, grant.MinterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return st, opts, m
}

func clientFor(c *grant.Credentials) *s3.Client {
	return s3.New(s3.Options{Region: c.Region, BaseEndpoint: aws.String(c.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)})
}

func put(ctx context.Context, c *s3.Client, bucket, key string) error {
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader([]byte("x"))})
	return err
}

func get(t *testing.T, c *s3.Client, bucket, key string) string {
	t.Helper()
	out, err := c.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer out.Body.Close()
	b, _ := io.ReadAll(out.Body)
	return string(b)
}

// forbidden checks that call fails with S3's 403 AccessDenied.
func forbidden(t *testing.T, what string, call func() error) {
	t.Helper()
	err := call()
	var re interface{ HTTPStatusCode() int }
	var api smithy.APIError
	switch {
	case err == nil:
		t.Errorf("%s: allowed, want 403", what)
	case !errors.As(err, &re) || re.HTTPStatusCode() != http.StatusForbidden:
		t.Errorf("%s: %v, want 403", what, err)
	case errors.As(err, &api) && api.ErrorCode() != "AccessDenied":
		t.Errorf("%s: %s, want AccessDenied", what, api.ErrorCode())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
