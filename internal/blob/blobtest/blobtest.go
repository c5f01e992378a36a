// Package blobtest gives tests a fresh, isolated object store: a temporary directory, or a new
// bucket on the S3-compatible server that BATON_TEST_S3_URL points at.
package blobtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/baton-dev/baton/internal/blob"
)

// S3URLEnv names the environment variable that points the tests at an S3-compatible server:
// its endpoint with the root credentials as userinfo, http://ACCESSKEY:SECRET@HOST:PORT.
const S3URLEnv = "BATON_TEST_S3_URL"

// region is the one a MinIO server answers to unless told otherwise.
const region = "us-east-1"

// File returns the URL of a store in a new directory that is removed when the test ends.
func File(t testing.TB) string {
	t.Helper()
	return "file://" + filepath.ToSlash(t.TempDir())
}

// S3 creates a bucket of its own for the test on the server BATON_TEST_S3_URL names, and
// returns the URL of a store under a prefix in it with the options that reach it. When the test
// ends the bucket is emptied and deleted. It skips the test, saying why, when the variable is
// unset.
func S3(t testing.TB) (string, blob.Options) {
	t.Helper()
	opts, ok := Server(t)
	if !ok {
		t.Skip("BATON_TEST_S3_URL is not set; skipping the S3 run (e.g. BATON_TEST_S3_URL=http://baton:batonsecret@127.0.0.1:9000)")
	}
	client := s3.New(s3.Options{
		Region:       opts.Region,
		BaseEndpoint: aws.String(opts.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(opts.AccessKey, opts.SecretKey, ""),
	})

	bucket := "baton-test-" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket %s on %s: %v", bucket, opts.Endpoint, err)
	}
	t.Cleanup(func() {
		// The test's context is already cancelled when cleanups run.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := removeBucket(ctx, client, bucket); err != nil {
			t.Errorf("remove bucket %s: %v", bucket, err)
		}
	})
	return "s3://" + bucket + "/artifacts", opts
}

// Server returns the options that reach the S3-compatible server BATON_TEST_S3_URL names, with
// its root credentials; false when the variable is unset.
func Server(t testing.TB) (blob.Options, bool) {
	t.Helper()
	raw := os.Getenv(S3URLEnv)
	if raw == "" {
		return blob.Options{}, false
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s: %v", S3URLEnv, err)
	}
	secret, _ := u.User.Password()
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User.Username() == "" || secret == "" {
		t.Fatalf("%s=%s: want http://ACCESSKEY:SECRET@HOST:PORT", S3URLEnv, u.Redacted())
	}
	return blob.Options{
		Endpoint:  u.Scheme + "://" + u.Host,
		Region:    region,
		AccessKey: u.User.Username(),
		SecretKey: secret,
	}, true
}

// removeBucket deletes every object in bucket, then the bucket.
func removeBucket(ctx context.Context, client *s3.Client, bucket string) error {
	pages := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, obj := range page.Contents {
			_, err := client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: obj.Key})
			if err != nil {
				return err
			}
		}
	}
	_, err := client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(bucket)})
	return err
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
