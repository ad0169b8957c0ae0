package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A secret is shown to its webhook's creator as "whsec_" and the standard
// base64 of its bytes; the bytes key the HMAC. The specification asks for
// 24 to 64 random bytes; NewSecret draws 32.
const (
	secretPrefix   = "whsec_"
	secretBytes    = 32
	minSecretBytes = 24
	maxSecretBytes = 64
)

// ErrMalformedSecret is the error of a secret that is not "whsec_" and the
// base64 of 24 to 64 bytes. Its messages never repeat the secret.
var ErrMalformedSecret = errors.New("malformed webhook secret")

// NewSecret returns a new secret: "whsec_" and the base64 of 32 random
// bytes.
func NewSecret() string {
	b := make([]byte, secretBytes)
	// crypto/rand.Read never returns an error: it ends the program when the
	// system cannot give randomness, rather than hand out a weak secret.
	_, _ = rand.Read(b)
	return secretPrefix + base64.StdEncoding.EncodeToString(b)
}

// ParseSecret returns the bytes a secret stands for.
func ParseSecret(s string) ([]byte, error) {
	enc, ok := strings.CutPrefix(s, secretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: it does not start with %q", ErrMalformedSecret, secretPrefix)
	}
	// Strict: one secret has one spelling, so a secret compared as text
	// (a rotation that keeps the old one) is compared as bytes.
	key, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("%w: its key is not standard, padded base64", ErrMalformedSecret)
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return nil, fmt.Errorf("%w: its key holds %d bytes, not %d to %d",
			ErrMalformedSecret, len(key), minSecretBytes, maxSecretBytes)
	}
	return key, nil
}

// Sign returns the webhook-signature header of a delivery: for each
// secret, "v1," and the base64 of the HMAC-SHA256, keyed with the
// secret's bytes, of "id.timestamp.body" (timestamp in Unix seconds),
// separated by spaces. During a rotation both secrets sign, so a receiver
// that knows either accepts the delivery.
//
// The ID must not hold a ".": the signed content would no longer say
// where the ID ends, and two deliveries could share a signature.
func Sign(secrets []string, id string, ts time.Time, body []byte) (string, error) {
	if len(secrets) == 0 {
		return "", errors.New("webhook: no secret to sign with")
	}
	if id == "" || strings.Contains(id, ".") {
		return "", fmt.Errorf("webhook: the delivery ID %q is empty or holds a '.'", id)
	}
	stamp := strconv.FormatInt(ts.Unix(), 10)
	var b strings.Builder
	for i, s := range secrets {
		key, err := ParseSecret(s)
		if err != nil {
			return "", fmt.Errorf("secret %d: %w", i, err)
		}
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(stamp))
		mac.Write([]byte{'.'})
		mac.Write(body)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return b.String(), nil
}
