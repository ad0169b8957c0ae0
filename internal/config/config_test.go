package config_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/guildhall/guildhall/internal/config"
)

// The defaults come from the tags, and a flag wins over its variable,
// which wins over the default.
func TestParse(t *testing.T) {
	d := config.Default()
	if d.Addr != ":8080" || d.DataDir != "./data" || d.ShutdownTimeout != 15*time.Second || d.RateLimit != 20 ||
		d.MaxAttachmentBytes != 25<<20 || d.BodyIdleTimeout != 30*time.Second || d.DBTimeout != 5*time.Second {
		t.Fatalf("Default() = %+v", d)
	}
	env := map[string]string{"GUILDHALL_SHUTDOWN_TIMEOUT": "40s", "GUILDHALL_TRUSTED_PROXIES": "10.0.0.0/8,192.0.2.1",
		"GUILDHALL_RATE_LIMIT": "3"}
	cases := []struct {
		name  string
		args  []string
		check func(config.Config) bool
		err   string
	}{
		{"variables over defaults", nil, func(c config.Config) bool {
			return c.ShutdownTimeout == 40*time.Second && c.RateLimit == 3 && len(c.TrustedProxies) == 2 && c.Addr == ":8080"
		}, ""},
		{"flags over variables", []string{"--shutdown-timeout=2s", "--rate-limit", "0"}, func(c config.Config) bool {
			return c.ShutdownTimeout == 2*time.Second && c.RateLimit == 0
		}, ""},
		{"a bad proxy", []string{"--trusted-proxies=not-an-address"}, nil, "trusted proxy"},
		{"a negative timeout", []string{"--db-timeout=-1s"}, nil, "must not be negative"},
		{"an unknown log level", []string{"--log-level=loud"}, nil, "log-level"},
		{"tracing off by default", nil, func(c config.Config) bool {
			return c.Tracing == "off" && c.TracingSampleRatio == 1
		}, ""},
		{"tracing on", []string{"--tracing=otlp", "--tracing-sample-ratio=0.25"}, func(c config.Config) bool {
			return c.Tracing == "otlp" && c.TracingSampleRatio == 0.25
		}, ""},
		{"an unknown exporter", []string{"--tracing=zipkin"}, nil, "tracing"},
		{"a sample ratio over 1", []string{"--tracing-sample-ratio=2"}, nil, "sample ratio"},
		{"the defaults: a 96 MiB memory limit, a 128 MiB cache", nil, func(c config.Config) bool {
			return c.MemoryLimit == 96<<20 && c.CacheBytes == 128<<20 && c.CacheEntryLimit() == 32<<20
		}, ""},
		{"a lower memory limit lowers the cap of the cache's entries", []string{"--memory-limit=25165824"}, func(c config.Config) bool {
			return c.CacheEntryLimit() == 8<<20
		}, ""},
		{"no memory limit, no cap of the cache's entries", []string{"--memory-limit=0", "--cache-bytes=1048576"}, func(c config.Config) bool {
			return c.CacheEntryLimit() == 0 && c.CacheBytes == 1<<20
		}, ""},
		{"a negative memory limit", []string{"--memory-limit=-1"}, nil, "must not be negative"},
		{"an owner's username of the contract's pattern", []string{"--owner=Ada.L_1-x"}, func(c config.Config) bool {
			return c.OwnerName == "Ada.L_1-x"
		}, ""},
		{"an owner's username with a space", []string{"--owner=ada lovelace"}, nil, "owner's username"},
		{"an owner's username of one character", []string{"--owner=a"}, nil, "owner's username"},
		{"an owner's username of 33 characters", []string{"--owner=" + strings.Repeat("a", 33)}, nil, "owner's username"},
		{"an owner's username beyond ASCII", []string{"--owner=zoë"}, nil, "owner's username"},
		{"an owner's username with a control character", []string{"--owner=ad\u0000min"}, nil, "owner's username"},
		{"an empty owner's username", []string{"--owner="}, nil, "owner's username"},
		{"webhooks refuse private destinations by default", nil, func(c config.Config) bool {
			return !c.WebhookAllowPrivate && !config.Default().WebhookAllowPrivate
		}, ""},
		{"webhooks allowed private destinations by the flag", []string{"--webhook-allow-private"}, func(c config.Config) bool {
			return c.WebhookAllowPrivate
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse("guildhall", tc.args, func(k string) string { return env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one about %q", err, tc.err)
				}
				return
			}
			if err != nil || !tc.check(c) {
				t.Fatalf("Parse = %+v, %v", c, err)
			}
		})
	}
}

// Every variable is in the README's configuration table.
func TestEveryVariableIsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for env, flag := range config.Vars() {
		if !strings.Contains(string(readme), "| `"+env+"` | `"+flag+"` |") {
			t.Errorf("README.md has no row for %s (%s)", env, flag)
		}
	}
}

// GUILDHALL_WEBHOOK_ALLOW_PRIVATE=true lets webhooks reach private
// destinations; anything but a boolean stops the start.
func TestWebhookAllowPrivateVariable(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  bool
		err   bool
	}{{"true", true, false}, {"false", false, false}, {"", false, false}, {"perhaps", false, true}} {
		t.Run(tc.value, func(t *testing.T) {
			c, err := config.Parse("guildhall", nil, func(k string) string {
				if k == "GUILDHALL_WEBHOOK_ALLOW_PRIVATE" {
					return tc.value
				}
				return ""
			})
			if tc.err {
				if err == nil {
					t.Fatalf("%q accepted: %+v", tc.value, c.WebhookAllowPrivate)
				}
				return
			}
			if err != nil || c.WebhookAllowPrivate != tc.want {
				t.Fatalf("%q: %v, %v; want %v", tc.value, c.WebhookAllowPrivate, err, tc.want)
			}
		})
	}
}
