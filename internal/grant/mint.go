package grant

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/baton-dev/baton/internal/blob"
)

// Credentials are short-lived S3 credentials minted for one attempt.
type Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// Expiration is when they stop working: STS's expiry or the token's, whichever is first.
	Expiration time.Time
	// Endpoint is the S3-compatible server's URL ("" for AWS's own); Region its region.
	Endpoint string
	Region   string
}

// STS bounds on a session's duration.
const (
	minDuration = 15 * time.Minute
	maxDuration = 12 * time.Hour
)

// DefaultRoleARN is the role assumed when none is configured. MinIO ignores the role (the
// session inherits the calling user's policy, narrowed by the session policy); AWS needs a real
// one (MinterOptions.RoleARN).
const DefaultRoleARN = "arn:aws:iam::000000000000:role/baton-tasks"

// MinterOptions configure a Minter.
type MinterOptions struct {
	// RoleARN is the role AssumeRole assumes (DefaultRoleARN when empty).
	RoleARN string
	// Endpoint is the STS endpoint; by default the store's S3 endpoint (where MinIO serves STS),
	// or AWS's regional STS endpoint for AWS's own S3.
	Endpoint string
	// MaxDuration bounds a session (12 hours when 0; at least 15 minutes).
	MaxDuration time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Minter mints credentials through STS AssumeRole, signing with the object store's own
// credentials.
type Minter struct {
	client   *sts.Client
	roleARN  string
	endpoint string // the S3 endpoint handed to the credentials' holder
	region   string
	max      time.Duration
	now      func() time.Time
}

// ErrNoS3: the object storage is not an S3-compatible server, so there is nothing to mint.
var ErrNoS3 = errors.New("grant: the object storage is not S3: there are no credentials to mint")

// NewMinter returns a Minter for the S3 store st.
func NewMinter(st *blob.Store, opts MinterOptions) (*Minter, error) {
	cfg := st.S3()
	if cfg == nil {
		return nil, ErrNoS3
	}
	endpoint := cmp.Or(opts.Endpoint, cfg.Endpoint)
	client := sts.NewFromConfig(cfg.AWS, func(o *sts.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	m := &Minter{client: client, roleARN: cmp.Or(opts.RoleARN, DefaultRoleARN), endpoint: cfg.Endpoint,
		region: cfg.AWS.Region, max: max(cmp.Or(opts.MaxDuration, maxDuration), minDuration), now: opts.Now}
	if m.now == nil {
		m.now = time.Now
	}
	return m, nil
}

// Mint returns credentials that can do what g allows on its s3:// prefixes, and nothing after
// until (the capability token's expiry). session names the session in the server's logs
// ("{task_id}-{attempt}").
func (m *Minter) Mint(ctx context.Context, g *S3, until time.Time, session string) (*Credentials, error) {
	now := m.now()
	if !until.After(now) {
		return nil, errors.New("grant: the token has expired")
	}
	policy, err := Policy(g, until)
	if err != nil {
		return nil, err
	}
	// STS sessions last 15 minutes at least; the policy's time condition ends them with the token.
	d := min(max(until.Sub(now).Round(time.Second)+time.Second, minDuration), m.max)
	out, err := m.client.AssumeRole(ctx, &sts.AssumeRoleInput{
		RoleArn:         aws.String(m.roleARN),
		RoleSessionName: aws.String(sessionName(session)),
		Policy:          aws.String(string(policy)),
		DurationSeconds: aws.Int32(int32(d / time.Second)),
	})
	if err != nil {
		return nil, fmt.Errorf("grant: STS AssumeRole: %w", err)
	}
	c := out.Credentials
	if c == nil || c.AccessKeyId == nil || c.SecretAccessKey == nil {
		return nil, errors.New("grant: STS AssumeRole answered no credentials")
	}
	exp := until
	if c.Expiration != nil && c.Expiration.Before(exp) {
		exp = *c.Expiration
	}
	return &Credentials{AccessKeyID: *c.AccessKeyId, SecretAccessKey: *c.SecretAccessKey, SessionToken: aws.ToString(c.SessionToken),
		Expiration: exp.UTC(), Endpoint: m.endpoint, Region: m.region}, nil
}

// sessionName makes s a valid role session name: 2 to 64 of [\w+=,.@-].
func sessionName(s string) string {
	b := []byte("baton-" + s)
	for i, c := range b {
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '+' || c == '=' ||
			c == ',' || c == '.' || c == '@' || c == '-'
		if !ok {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), 64)])
}

// Session is the session name of an attempt.
func Session(taskID string, attempt int) string { return taskID + "-" + strconv.Itoa(attempt) }
