// Package config reads Guildhall's configuration from flags, each with an
// environment variable of the same meaning (the flag wins).
package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is everything an instance needs.
type Config struct {
	Addr               string
	DataDir            string
	DatabaseURL        string
	BootstrapToken     string
	OwnerName          string
	MaxAttachmentBytes int64
	RateLimit          float64
	CORSOrigins        []string
	EventRetention     time.Duration // 0 keeps every event
	SSEHeartbeat       time.Duration // interval of event-stream heartbeats; 0 means 15s
	LogLevel           string
	// DebugAddr, when set, serves net/http/pprof there (never on the API
	// address): for profiling a running instance.
	DebugAddr       string
	ShutdownTimeout time.Duration
}

// Default is the configuration with nothing set.
func Default() Config {
	return Config{Addr: ":8080", DataDir: "./data", OwnerName: "owner", MaxAttachmentBytes: 25 << 20,
		RateLimit: 20, LogLevel: "info", ShutdownTimeout: 15 * time.Second, SSEHeartbeat: 15 * time.Second}
}

// Parse reads flags (args, without the program name) over the environment.
func Parse(name string, args []string, env func(string) string) (Config, error) {
	c := Default()
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var cors string
	var err error
	str := func(p *string, flagName, envName, usage string) {
		if v := env(envName); v != "" {
			*p = v
		}
		fs.StringVar(p, flagName, *p, usage+" ($"+envName+")")
	}
	str(&c.Addr, "addr", "GUILDHALL_ADDR", "listen address")
	str(&c.DataDir, "data-dir", "GUILDHALL_DATA_DIR", "directory of the SQLite file and attachment blobs")
	str(&c.DatabaseURL, "database-url", "GUILDHALL_DATABASE_URL", "postgres:// URL; empty uses embedded SQLite")
	str(&c.BootstrapToken, "bootstrap-token", "GUILDHALL_BOOTSTRAP_TOKEN", "owner token to create on an empty store (at least 32 characters)")
	str(&c.OwnerName, "owner", "GUILDHALL_OWNER", "username of the owner created on an empty store")
	str(&c.LogLevel, "log-level", "GUILDHALL_LOG_LEVEL", "debug, info, warn or error")
	str(&c.DebugAddr, "debug-addr", "GUILDHALL_DEBUG_ADDR", "address of a net/http/pprof listener for profiling (empty: none)")
	cors = env("GUILDHALL_CORS_ORIGINS")
	fs.StringVar(&cors, "cors-origins", cors, "comma-separated origins allowed to call from a browser ($GUILDHALL_CORS_ORIGINS)")
	if v := env("GUILDHALL_MAX_ATTACHMENT_BYTES"); v != "" {
		if c.MaxAttachmentBytes, err = strconv.ParseInt(v, 10, 64); err != nil {
			return c, fmt.Errorf("GUILDHALL_MAX_ATTACHMENT_BYTES: %w", err)
		}
	}
	fs.Int64Var(&c.MaxAttachmentBytes, "max-attachment-bytes", c.MaxAttachmentBytes, "largest attachment upload ($GUILDHALL_MAX_ATTACHMENT_BYTES)")
	if v := env("GUILDHALL_RATE_LIMIT"); v != "" {
		if c.RateLimit, err = strconv.ParseFloat(v, 64); err != nil {
			return c, fmt.Errorf("GUILDHALL_RATE_LIMIT: %w", err)
		}
	}
	fs.Float64Var(&c.RateLimit, "rate-limit", c.RateLimit, "requests per second per token (per address without one); 0 turns it off ($GUILDHALL_RATE_LIMIT)")
	if v := env("GUILDHALL_EVENT_RETENTION"); v != "" {
		if c.EventRetention, err = time.ParseDuration(v); err != nil {
			return c, fmt.Errorf("GUILDHALL_EVENT_RETENTION: %w", err)
		}
	}
	fs.DurationVar(&c.EventRetention, "event-retention", c.EventRetention, "delete audit events older than this; 0 keeps all ($GUILDHALL_EVENT_RETENTION)")
	if v := env("GUILDHALL_SSE_HEARTBEAT"); v != "" {
		if c.SSEHeartbeat, err = time.ParseDuration(v); err != nil {
			return c, fmt.Errorf("GUILDHALL_SSE_HEARTBEAT: %w", err)
		}
	}
	fs.DurationVar(&c.SSEHeartbeat, "sse-heartbeat", c.SSEHeartbeat, "interval of the heartbeat comments on idle event streams ($GUILDHALL_SSE_HEARTBEAT)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	for _, o := range strings.Split(cors, ",") {
		if o = strings.TrimSpace(o); o != "" {
			c.CORSOrigins = append(c.CORSOrigins, o)
		}
	}
	return c, c.Validate()
}

// Validate checks the values.
func (c Config) Validate() error {
	var errs []error
	if c.MaxAttachmentBytes < 0 {
		errs = append(errs, errors.New("max attachment bytes must not be negative"))
	}
	if c.RateLimit < 0 {
		errs = append(errs, errors.New("rate limit must not be negative"))
	}
	if c.EventRetention < 0 {
		errs = append(errs, errors.New("event retention must not be negative"))
	}
	if c.SSEHeartbeat < 0 {
		errs = append(errs, errors.New("the event-stream heartbeat must not be negative"))
	}
	if c.BootstrapToken != "" && len(c.BootstrapToken) < 32 {
		errs = append(errs, errors.New("the bootstrap token must be at least 32 characters"))
	}
	if c.DatabaseURL != "" && !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
		errs = append(errs, errors.New("the database URL must start with postgres://"))
	}
	return errors.Join(errs...)
}

// Env is os.Getenv, for Parse.
func Env(k string) string { return os.Getenv(k) }
