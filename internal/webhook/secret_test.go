package webhook_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/guildhall/guildhall/internal/webhook"
)

// verify checks a delivery's headers with the Standard Webhooks reference
// library for Go, an implementation independent of this package.
func verify(t *testing.T, secret string, body []byte, h http.Header) error {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatalf("the reference library refuses the secret: %v", err)
	}
	return wh.VerifyIgnoringTimestamp(body, h)
}

func headers(id string, ts time.Time, sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", sig)
	return h
}

func TestNewSecret(t *testing.T) {
	a, b := webhook.NewSecret(), webhook.NewSecret()
	if a == b {
		t.Fatalf("two secrets are the same: %s", a)
	}
	for _, s := range []string{a, b} {
		enc, ok := strings.CutPrefix(s, "whsec_")
		if !ok {
			t.Fatalf("secret %q lacks the whsec_ prefix", s)
		}
		raw, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || len(raw) != 32 {
			t.Fatalf("secret %q: %d bytes, err %v; want 32 bytes of standard base64", s, len(raw), err)
		}
		key, err := webhook.ParseSecret(s)
		if err != nil || string(key) != string(raw) {
			t.Fatalf("ParseSecret(%q) = %x, %v; want %x", s, key, err, raw)
		}
	}
}

func TestParseSecret(t *testing.T) {
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	cases := []struct {
		name   string
		secret string
		bytes  int // 0: refused
	}{
		{"32 bytes", "whsec_" + b64(32), 32},
		{"24 bytes, the least", "whsec_" + b64(24), 24},
		{"64 bytes, the most", "whsec_" + b64(64), 64},
		{"23 bytes", "whsec_" + b64(23), 0},
		{"65 bytes", "whsec_" + b64(65), 0},
		{"no prefix", b64(32), 0},
		{"another prefix", "whsk_" + b64(32), 0},
		{"empty", "", 0},
		{"prefix alone", "whsec_", 0},
		{"URL-safe alphabet", "whsec_" + strings.Repeat("-_", 16), 0},
		{"unpadded", "whsec_" + strings.TrimRight(b64(32), "="), 0},
		{"trailing space", "whsec_" + b64(32) + " ", 0},
		{"non-canonical final character", "whsec_" + b64(32)[:42] + "B=", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, err := webhook.ParseSecret(tc.secret)
			if tc.bytes == 0 {
				if !errors.Is(err, webhook.ErrMalformedSecret) {
					t.Fatalf("ParseSecret = %d bytes, %v; want ErrMalformedSecret", len(key), err)
				}
				if len(tc.secret) > 8 && strings.Contains(err.Error(), tc.secret[6:]) {
					t.Fatalf("the error repeats the secret: %v", err)
				}
				return
			}
			if err != nil || len(key) != tc.bytes {
				t.Fatalf("ParseSecret = %d bytes, %v; want %d", len(key), err, tc.bytes)
			}
		})
	}
}

// The known answer of the Standard Webhooks reference libraries' tests
// (libraries/go/webhook_test.go, TestWebhookSign, and the same values in
// the C# library's tests), at github.com/standard-webhooks/standard-webhooks.
func TestSignKnownAnswer(t *testing.T) {
	got, err := webhook.Sign([]string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		"msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; err != nil || got != want {
		t.Fatalf("Sign = %q, %v; want %q", got, err, want)
	}
}

func TestSignVerifiedByReference(t *testing.T) {
	secret := webhook.NewSecret()
	id := "01JZ8Q4W3E5R6T7Y8U9I0OPASD"
	ts := time.Now()
	body := []byte(`{"seq":42,"type":"role.updated","data":{"name":"Mods ✓"}}`)
	sig, err := webhook.Sign([]string{secret}, id, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(t, secret, body, headers(id, ts, sig)); err != nil {
		t.Fatalf("the reference library rejects the signature %q: %v", sig, err)
	}
	wh, _ := standardwebhooks.NewWebhook(secret)
	if err := wh.Verify(body, headers(id, ts, sig)); err != nil {
		t.Fatalf("the reference library rejects a current timestamp: %v", err)
	}

	tampered := []struct {
		name   string
		secret string
		body   []byte
		h      http.Header
	}{
		{"another body", secret, bytes.Replace(body, []byte("42"), []byte("43"), 1), headers(id, ts, sig)},
		{"another ID", secret, body, headers(id+"X", ts, sig)},
		{"another timestamp", secret, body, headers(id, ts.Add(time.Second), sig)},
		{"another secret", webhook.NewSecret(), body, headers(id, ts, sig)},
	}
	for _, tc := range tampered {
		t.Run(tc.name, func(t *testing.T) {
			if err := verify(t, tc.secret, tc.body, tc.h); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
				t.Fatalf("verify = %v; want no matching signature", err)
			}
		})
	}
}

func TestSignRotationSignsTwice(t *testing.T) {
	current, previous, other := webhook.NewSecret(), webhook.NewSecret(), webhook.NewSecret()
	id, ts, body := "msg_rotation", time.Unix(1_900_000_000, 0), []byte(`{"type":"webhook.updated"}`)
	sig, err := webhook.Sign([]string{current, previous}, id, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(sig, " ")
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "v1,") || !strings.HasPrefix(parts[1], "v1,") || parts[0] == parts[1] {
		t.Fatalf("signature %q: want two different v1 signatures separated by a space", sig)
	}
	for name, s := range map[string]string{"current": current, "previous": previous} {
		if err := verify(t, s, body, headers(id, ts, sig)); err != nil {
			t.Fatalf("a receiver with the %s secret rejects the delivery: %v", name, err)
		}
	}
	if err := verify(t, other, body, headers(id, ts, sig)); err == nil {
		t.Fatal("a receiver with an unrelated secret accepts the delivery")
	}
	single, _ := webhook.Sign([]string{previous}, id, ts, body)
	if parts[1] != single {
		t.Fatalf("the previous secret's part %q differs from its own signature %q", parts[1], single)
	}
}

func TestSignRefuses(t *testing.T) {
	good := webhook.NewSecret()
	cases := []struct {
		name    string
		secrets []string
		id      string
		want    error // nil: any error
	}{
		{"no secret", nil, "msg_1", nil},
		{"a malformed secret", []string{good, "whsec_short"}, "msg_1", webhook.ErrMalformedSecret},
		{"an empty ID", []string{good}, "", nil},
		{"an ID with a dot", []string{good}, "msg.1", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sig, err := webhook.Sign(tc.secrets, tc.id, time.Now(), []byte(`{}`))
			if err == nil || sig != "" {
				t.Fatalf("Sign = %q, %v; want an error and no signature", sig, err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Sign error %v; want %v", err, tc.want)
			}
		})
	}
}
