package blob

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	cloudblob "gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

// openS3 opens the store at rawURL, s3://bucket[/prefix][?endpoint=URL&region=NAME].
func openS3(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("blob: open %s: %w", redact(rawURL), err)
	}
	fail := func(format string, args ...any) (*Store, error) {
		return nil, fmt.Errorf("blob: open %s: %s", u.Redacted(), fmt.Sprintf(format, args...))
	}
	switch {
	case u.User != nil:
		return fail("credentials do not belong in the URL; pass them in the options or the environment")
	case u.Fragment != "":
		return fail("the URL has a fragment")
	case u.RawPath != "":
		return fail("the prefix may not be percent-encoded")
	}
	bucket := u.Host
	if problem := bucketProblem(bucket); problem != "" {
		return fail("bucket name %q %s", bucket, problem)
	}
	prefix := strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	if prefix != "" {
		if err := CheckPrefix(prefix); err != nil {
			return fail("prefix: %v", err)
		}
	}
	q := u.Query()
	for name, values := range q {
		if name != "endpoint" && name != "region" {
			return fail("unknown query parameter %q (want endpoint or region)", name)
		}
		if len(values) != 1 {
			return fail("query parameter %q is given %d times", name, len(values))
		}
	}
	endpoint := cmp.Or(q.Get("endpoint"), opts.Endpoint,
		os.Getenv("AWS_ENDPOINT_URL_S3"), os.Getenv("AWS_ENDPOINT_URL"))
	region := cmp.Or(q.Get("region"), opts.Region,
		os.Getenv("AWS_REGION"), os.Getenv("AWS_DEFAULT_REGION"), "us-east-1")
	client, cfg, err := newS3Client(ctx, endpoint, region, opts)
	if err != nil {
		return fail("%v", err)
	}
	b, err := s3blob.OpenBucket(ctx, client, bucket, &s3blob.Options{
		// The library's uploader ignores the client's setting unless it is passed on.
		RequestChecksumCalculation: cfg.RequestChecksumCalculation,
	})
	if err != nil {
		return fail("%v", err)
	}
	root := "s3://" + bucket + "/"
	if prefix != "" {
		root += prefix + "/"
		b = cloudblob.PrefixedBucket(b, prefix+"/")
	}
	return &Store{bucket: b, scheme: "s3", root: root, s3: &S3Config{Bucket: bucket, Endpoint: endpoint, AWS: cfg}}, nil
}

// newS3Client builds an S3 client for endpoint ("" for AWS's own) in region, signing with the
// options' credentials or, when they are empty, with those of the usual AWS chain.
func newS3Client(ctx context.Context, endpoint, region string, opts Options) (*s3.Client, aws.Config, error) {
	if endpoint != "" {
		u, err := url.Parse(endpoint)
		switch {
		case err != nil:
			return nil, aws.Config{}, fmt.Errorf("endpoint: %w", err)
		case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
			return nil, aws.Config{}, fmt.Errorf("endpoint %s: want http://HOST[:PORT] or https://HOST[:PORT]", u.Redacted())
		case u.User != nil:
			return nil, aws.Config{}, fmt.Errorf("endpoint %s: credentials do not belong in the endpoint", u.Redacted())
		}
	}
	load := []func(*config.LoadOptions) error{config.WithRegion(region)}
	if opts.AccessKey != "" || opts.SecretKey != "" || opts.SessionToken != "" {
		if opts.AccessKey == "" || opts.SecretKey == "" {
			return nil, aws.Config{}, errors.New("credentials need both an access key and a secret key")
		}
		load = append(load, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(opts.AccessKey, opts.SecretKey, opts.SessionToken)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true
		}
	})
	return client, cfg, nil
}

// isNoSuchBucket reports whether err is S3's answer for a bucket that does not exist.
func isNoSuchBucket(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchBucket"
}
