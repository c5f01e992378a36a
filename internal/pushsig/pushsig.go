// Package pushsig signs push deliveries and checks their signatures: the headers, the HMAC over
// timestamp and body, and what a target's secret may be.
package pushsig

// How Baton authenticates itself to a push target. Each target may have a secret, shared with
// Baton out of band; a delivery to such a target carries
//
//	Authorization: Bearer <secret>
//	Baton-Timestamp: <Unix seconds when the request was signed>
//	Baton-Signature: v1=<lowercase hex of HMAC-SHA256(key = secret, message = timestamp "." body)>
//
// where timestamp is the Baton-Timestamp header exactly as sent and body the exact request body
// bytes. The signature binds the body to the time it was sent, so a target that also refuses
// timestamps outside a small window refuses tampered and replayed deliveries. This file is the
// only place the format is written down in code: the push dispatcher signs with Sign and the
// worker SDK verifies with Check.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// The headers of a signed push delivery, besides Authorization.
const (
	TimestampHeader = "Baton-Timestamp"
	SignatureHeader = "Baton-Signature"
)

// pushSignaturePrefix names the signature scheme; a later scheme would get another prefix.
const pushSignaturePrefix = "v1="

// CheckSecret reports whether s can be a push target's secret: it is sent as a bearer token,
// so it must be non-empty printable ASCII without spaces.
func CheckSecret(s string) error {
	if s == "" {
		return errors.New("the secret is empty")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return errors.New("the secret must be printable ASCII without spaces (it is sent as a bearer token)")
		}
	}
	return nil
}

// Sign returns the Baton-Timestamp and Baton-Signature values of a push request whose body
// is body, signed with secret at ts (to the second).
func Sign(secret string, ts time.Time, body []byte) (timestamp, signature string) {
	timestamp = strconv.FormatInt(ts.Unix(), 10)
	return timestamp, pushSignaturePrefix + hex.EncodeToString(pushMAC(secret, timestamp, body))
}

// Check reports whether signature, a Baton-Signature value, signs body sent with the
// Baton-Timestamp value timestamp under secret. It compares in constant time. It does not judge
// the timestamp's age: that is the verifier's policy.
func Check(secret, timestamp string, body []byte, signature string) error {
	hexMAC, ok := strings.CutPrefix(signature, pushSignaturePrefix)
	got, err := hex.DecodeString(hexMAC)
	if !ok || err != nil || len(got) != sha256.Size || hexMAC != hex.EncodeToString(got) {
		return errors.New("malformed " + SignatureHeader + " (want v1= and 64 lowercase hex digits)")
	}
	if !hmac.Equal(got, pushMAC(secret, timestamp, body)) {
		return errors.New(SignatureHeader + " does not match the body and timestamp")
	}
	return nil
}

func pushMAC(secret, timestamp string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}
