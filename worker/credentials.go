package worker

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// Object storage credentials: with S3 object storage the server mints, for each attempt,
// short-lived credentials that can read the attempt's input prefixes and write its own output and
// scratch prefixes, nothing else, and that never outlive its capability token. A trusted handler
// gets them with Task.Credentials (or hands Task.AWSCredentials to an AWS SDK client); `baton
// worker` hands them to its child as the usual AWS variables.

// Credentials are an attempt's object storage credentials.
type Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// Expiration is when they stop working.
	Expiration time.Time
	// EndpointURL is the S3-compatible server ("" for AWS's own); Region its region.
	EndpointURL string
	Region      string
	// ReadPrefixes and WritePrefixes are what they allow: s3://bucket/prefix/ URIs.
	ReadPrefixes  []string
	WritePrefixes []string

	taskID  string
	attempt int
}

// ErrNoCredentials: the server's object storage is not an S3-compatible server (a directory in
// development), so there are no credentials to mint and no isolation of files between tasks.
var ErrNoCredentials = errors.New("baton worker: the server's object storage is not S3: no credentials to mint")

// Env returns the credentials as the AWS SDKs' and the AWS CLI's environment variables.
func (c *Credentials) Env() map[string]string {
	env := map[string]string{
		"AWS_ACCESS_KEY_ID":         c.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY":     c.SecretAccessKey,
		"AWS_SESSION_TOKEN":         c.SessionToken,
		"AWS_CREDENTIAL_EXPIRATION": c.Expiration.UTC().Format(time.RFC3339),
		"AWS_REGION":                c.Region,
		"AWS_DEFAULT_REGION":        c.Region,
	}
	if c.EndpointURL != "" {
		env["AWS_ENDPOINT_URL"] = c.EndpointURL
	}
	return env
}

// ScratchPrefix is the attempt's scratch space: s3://.../scratch/{task_id}/{attempt}/.
func (c *Credentials) ScratchPrefix() string {
	return c.own("scratch")
}

// OutputPrefix is where the attempt writes what it writes for the output dataset with the
// given uuid: the batches of a buffered dataset (s3://.../buffers/{dataset_uuid}/{task_id}/
// {attempt}/, which PublishBatch and buffer-publish accept), the files of any other dataset's
// version (s3://.../datasets/{dataset_uuid}/{task_id}/{attempt}/). "" if it has none.
func (c *Credentials) OutputPrefix(datasetUUID string) string {
	return c.own(datasetUUID)
}

// own is the write prefix that ends in /{segment}/{task_id}/{attempt}/.
func (c *Credentials) own(segment string) string {
	suffix := "/" + segment + "/" + c.taskID + "/" + strconv.Itoa(c.attempt) + "/"
	for _, p := range c.WritePrefixes {
		if strings.HasSuffix(p, suffix) {
			return p
		}
	}
	return ""
}

// Token returns the attempt's newest capability token and its expiry: the claim's, or the one a
// heartbeat renewed it with.
func (t *Task) Token() (string, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" {
		return t.token, t.tokenExp
	}
	return t.CapabilityToken, t.CapabilityTokenExpiresAt
}

func (t *Task) setToken(token string, exp time.Time) {
	t.mu.Lock()
	t.token, t.tokenExp = token, exp
	t.mu.Unlock()
}

// Credentials returns the attempt's object storage credentials, minting new ones when there are
// none yet or the last have less than a third of their life left. ErrNoCredentials says the
// server's object storage is not S3.
func (t *Task) Credentials(ctx context.Context) (*Credentials, error) {
	if t.mint == nil {
		return nil, errors.New("baton worker: Credentials: the task was not claimed by a Worker")
	}
	t.mu.Lock()
	c, at := t.creds, t.credsAt
	t.mu.Unlock()
	if c != nil && time.Until(c.Expiration) > c.Expiration.Sub(at)/3 {
		return c, nil
	}
	token, _ := t.Token()
	at = time.Now()
	c, err := t.mint(ctx, token)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.creds, t.credsAt = c, at
	t.mu.Unlock()
	return c, nil
}

// AWSCredentials is an aws.CredentialsProvider of the attempt's credentials, for an AWS SDK
// client (s3.Options.Credentials): it renews them as they age.
func (t *Task) AWSCredentials() aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(ctx context.Context) (aws.Credentials, error) {
		c, err := t.Credentials(ctx)
		if err != nil {
			return aws.Credentials{}, err
		}
		return aws.Credentials{AccessKeyID: c.AccessKeyID, SecretAccessKey: c.SecretAccessKey, SessionToken: c.SessionToken,
			Source: "baton", CanExpire: true, Expires: c.Expiration}, nil
	})
}

// pathCredentials is the internal dialect's credential minting.
const pathCredentials = "/internal/task-credentials"

// mintCredentials exchanges the attempt's capability token for credentials.
func (a *attempt) mintCredentials(ctx context.Context, token string) (*Credentials, error) {
	var ans struct {
		AccessKeyID     string    `json:"access_key_id"`
		SecretAccessKey string    `json:"secret_access_key"`
		SessionToken    string    `json:"session_token"`
		Expiration      time.Time `json:"expiration"`
		EndpointURL     string    `json:"endpoint_url"`
		Region          string    `json:"region"`
		ReadPrefixes    []string  `json:"read_prefixes"`
		WritePrefixes   []string  `json:"write_prefixes"`
	}
	body := map[string]any{"task_id": a.task.ID, "attempt": a.task.Attempt, "lease_token": a.lease}
	err := a.api.postWith(ctx, requestTimeout, a.routes.credentials, []string{capabilityHeader, token}, body, &ans)
	var e *apiError
	if errors.As(err, &e) && e.Status == http.StatusNotImplemented {
		return nil, ErrNoCredentials
	}
	if err != nil {
		return nil, err
	}
	return &Credentials{AccessKeyID: ans.AccessKeyID, SecretAccessKey: ans.SecretAccessKey, SessionToken: ans.SessionToken,
		Expiration: ans.Expiration, EndpointURL: ans.EndpointURL, Region: ans.Region, ReadPrefixes: ans.ReadPrefixes,
		WritePrefixes: ans.WritePrefixes, taskID: a.task.ID, attempt: a.task.Attempt}, nil
}
