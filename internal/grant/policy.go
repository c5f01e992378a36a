package grant

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxPolicySize is the largest session policy STS accepts, in characters (AWS's limit, which
// MinIO applies too).
const MaxPolicySize = 2048

// ErrPolicyTooLarge: the grant has too many prefixes for one session policy.
var ErrPolicyTooLarge = errors.New("grant: the session policy would exceed 2,048 characters")

type statement struct {
	Effect    string                    `json:"Effect"`
	Action    []string                  `json:"Action"`
	Resource  []string                  `json:"Resource"`
	Condition map[string]map[string]any `json:"Condition"`
}

type policyDoc struct {
	Version   string      `json:"Version"`
	Statement []statement `json:"Statement"`
}

// Policy returns the session policy that lets credentials do what g allows on its s3://
// prefixes until the given time, and nothing else: GetObject under the read and the write
// prefixes, PutObject (and aborting its own multipart uploads) under the write prefixes only,
// and ListBucket only with an s3:prefix inside one of them, so the bucket's root cannot be
// listed. Every statement is also conditioned on aws:CurrentTime being before until, so that
// credentials that STS must make last longer (15 minutes at least) still do nothing after it.
// It refuses prefixes that are not canonical s3:// prefixes, so it can never widen a grant.
func Policy(g *S3, until time.Time) ([]byte, error) {
	if g.Empty() {
		return nil, errors.New("grant: an empty grant has no policy")
	}
	var bucket string
	split := func(p string) (string, error) {
		rest, ok := strings.CutPrefix(p, "s3://")
		b, key, _ := strings.Cut(rest, "/")
		switch {
		case !ok:
			return "", fmt.Errorf("%w: %q is not an s3:// prefix", ErrPrefix, p)
		case bucket != "" && b != bucket:
			return "", fmt.Errorf("%w: %q is in another bucket than %q", ErrPrefix, p, bucket)
		}
		if c, err := Prefix(p, "s3://"+b+"/"); err != nil || c != p {
			return "", fmt.Errorf("%w: %q is not canonical", ErrPrefix, p)
		}
		bucket = b
		return key, nil
	}
	var read, write, listed []string
	for _, p := range g.ReadPrefixes {
		key, err := split(p)
		if err != nil {
			return nil, err
		}
		read, listed = append(read, "arn:aws:s3:::"+bucket+"/"+key+"*"), append(listed, key+"*")
	}
	for _, p := range g.WritePrefixes {
		key, err := split(p)
		if err != nil {
			return nil, err
		}
		write, listed = append(write, "arn:aws:s3:::"+bucket+"/"+key+"*"), append(listed, key+"*")
	}
	before := map[string]any{"aws:CurrentTime": until.UTC().Format(time.RFC3339)}
	doc := policyDoc{Version: "2012-10-17"}
	if objects := append(append([]string{}, read...), write...); len(objects) > 0 {
		doc.Statement = append(doc.Statement, statement{Effect: "Allow", Action: []string{"s3:GetObject"}, Resource: objects,
			Condition: map[string]map[string]any{"DateLessThan": before}})
	}
	if len(write) > 0 {
		doc.Statement = append(doc.Statement, statement{Effect: "Allow", Action: []string{"s3:PutObject", "s3:AbortMultipartUpload"},
			Resource: write, Condition: map[string]map[string]any{"DateLessThan": before}})
	}
	doc.Statement = append(doc.Statement, statement{Effect: "Allow", Action: []string{"s3:ListBucket"},
		Resource:  []string{"arn:aws:s3:::" + bucket},
		Condition: map[string]map[string]any{"DateLessThan": before, "StringLike": {"s3:prefix": listed}}})
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxPolicySize {
		return nil, fmt.Errorf("%w (%d characters for %d prefixes)", ErrPolicyTooLarge, len(b), len(read)+len(write))
	}
	return b, nil
}
