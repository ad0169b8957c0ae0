// Package config is Guildhall's configuration: one struct whose tags declare,
// in one place, every flag, its GUILDHALL_* environment variable, its default
// and its help. cmd/guildhall parses it with kong (the flag wins over the
// variable); tests take Default() and change fields.
package config

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Store says where the state lives. The commands that only need the store
// (token create, backup, restore) take these flags alone.
type Store struct {
	DataDir     string `name:"data-dir" env:"GUILDHALL_DATA_DIR" default:"./data" help:"Directory of the SQLite file and the attachment blobs."`
	DatabaseURL string `name:"database-url" env:"GUILDHALL_DATABASE_URL" help:"A postgres:// URL switches to PostgreSQL; empty uses the embedded SQLite store."`
}

// Tokens bounds a user's tokens. Both the server and `guildhall token
// create` take it, so that neither mints past it.
type Tokens struct {
	MaxTokensPerUser int `name:"max-tokens-per-user" env:"GUILDHALL_MAX_TOKENS_PER_USER" default:"25" help:"Most tokens a user may hold (revoked and expired ones not counted); one more is a 409 limit_exceeded."`
}

// Config is everything an instance needs.
type Config struct {
	Store
	Tokens

	Addr                string        `name:"addr" env:"GUILDHALL_ADDR" default:":8080" help:"Listen address."`
	BootstrapToken      string        `name:"bootstrap-token" env:"GUILDHALL_BOOTSTRAP_TOKEN" help:"The owner's token on an empty store (at least 32 characters); ignored otherwise."`
	OwnerName           string        `name:"owner" env:"GUILDHALL_OWNER" default:"owner" help:"Username of the owner created on an empty store."`
	MaxAttachmentBytes  int64         `name:"max-attachment-bytes" env:"GUILDHALL_MAX_ATTACHMENT_BYTES" default:"26214400" help:"Largest attachment upload in bytes; larger is a 413."`
	RateLimit           float64       `name:"rate-limit" env:"GUILDHALL_RATE_LIMIT" default:"20" help:"Requests per second per user, all their tokens together (per client address without a known token), bursts of twice that; 0 turns it off."`
	RateLimitClients    int           `name:"rate-limit-clients" env:"GUILDHALL_RATE_LIMIT_CLIENTS" default:"10000" help:"How many client addresses, how many users and how many tokens the rate limiter remembers (least recently seen forgotten first)."`
	MaxEventStreams     int           `name:"max-event-streams" env:"GUILDHALL_MAX_EVENT_STREAMS" default:"5" help:"Most event streams one user may have open at once on this instance; one more is a 429 rate_limited."`
	TrustedProxies      []string      `name:"trusted-proxies" env:"GUILDHALL_TRUSTED_PROXIES" sep:"," help:"Comma-separated CIDRs of reverse proxies whose X-Forwarded-For is believed; empty: the client address is the connection's."`
	CORSOrigins         []string      `name:"cors-origins" env:"GUILDHALL_CORS_ORIGINS" sep:"," help:"Comma-separated origins allowed to call from a browser; empty allows none."`
	EventRetention      time.Duration `name:"event-retention" env:"GUILDHALL_EVENT_RETENTION" default:"0s" help:"Delete audit events older than this (e.g. 2160h); 0 keeps every event."`
	SSEHeartbeat        time.Duration `name:"sse-heartbeat" env:"GUILDHALL_SSE_HEARTBEAT" default:"15s" help:"Interval of the heartbeat comments on idle event streams."`
	LogLevel            string        `name:"log-level" env:"GUILDHALL_LOG_LEVEL" default:"info" enum:"debug,info,warn,error" help:"debug, info, warn or error (JSON logs on stderr)."`
	DebugAddr           string        `name:"debug-addr" env:"GUILDHALL_DEBUG_ADDR" help:"Address of a net/http/pprof listener for profiling, never the API address (empty: none)."`
	ShutdownTimeout     time.Duration `name:"shutdown-timeout" env:"GUILDHALL_SHUTDOWN_TIMEOUT" default:"15s" help:"On SIGTERM, how long requests in flight (a long download) may take to finish before they are cut."`
	DrainDelay          time.Duration `name:"drain-delay" env:"GUILDHALL_DRAIN_DELAY" default:"0s" help:"On SIGTERM, how long to go on serving with /readyz at 503 before closing the listener, so a load balancer stops sending first."`
	RequestTimeout      time.Duration `name:"request-timeout" env:"GUILDHALL_REQUEST_TIMEOUT" default:"30s" help:"Deadline of a request, transfers of attachment bytes and event streams excepted."`
	DBTimeout           time.Duration `name:"db-timeout" env:"GUILDHALL_DB_TIMEOUT" default:"5s" help:"Budget of a request's database work, all its statements and waits together (the time a client takes to send a body not counted); past it, 503. Work outside requests gets it per statement, four times it per write transaction."`
	BodyIdleTimeout     time.Duration `name:"body-idle-timeout" env:"GUILDHALL_BODY_IDLE_TIMEOUT" default:"30s" help:"A request body (an upload or JSON) that sends nothing for this long is a 408."`
	BodyMinRate         int64         `name:"body-min-rate" env:"GUILDHALL_BODY_MIN_RATE" default:"1024" help:"Slowest accepted request body, in bytes per second on average after the first idle timeout; 0 turns the check off."`
	ContractCheck       bool          `name:"contract-check" env:"GUILDHALL_CONTRACT_CHECK" help:"Check every answer under /api against the contract and log, as \"contract violation\", each one it does not declare (for test runs: it keeps JSON bodies in memory)."`
	CacheBytes          int           `name:"cache-bytes" env:"GUILDHALL_CACHE_BYTES" default:"134217728" help:"Bound of the read cache's size in bytes (128 MiB by default): a quarter, at most 16 MiB and a third of GUILDHALL_MEMORY_LIMIT, for credentials and pages; the rest for users, kept packed."`
	MemoryLimit         int64         `name:"memory-limit" env:"GUILDHALL_MEMORY_LIMIT" default:"100663296" help:"Soft memory limit of the Go runtime in bytes (96 MiB by default; GOMEMLIMIT, when set, wins), raised by what the read cache's packed users hold; 0: no limit."`
	Tracing             string        `name:"tracing" env:"GUILDHALL_TRACING" default:"off" enum:"off,otlp" help:"off, or otlp: send OpenTelemetry traces over OTLP/HTTP to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318)."`
	WebhookAllowPrivate bool          `name:"webhook-allow-private" env:"GUILDHALL_WEBHOOK_ALLOW_PRIVATE" help:"Let webhooks reach destinations that resolve to loopback, private, link-local, shared or unspecified addresses (refused by default: a webhook's creator could otherwise reach the service's own network)."`
	TracingSampleRatio  float64       `name:"tracing-sample-ratio" env:"GUILDHALL_TRACING_SAMPLE_RATIO" default:"1" help:"Share of the traces this instance starts that are recorded, 0 to 1; a request with a traceparent header follows its caller's decision."`

	// SpanProcessor, with Tracing "otlp", receives the spans instead of
	// the OTLP exporter. Tests set it; it has no flag.
	SpanProcessor sdktrace.SpanProcessor `kong:"-"`
}

// Default is the configuration with nothing set: the defaults of the tags
// above, and nothing from the environment.
func Default() Config {
	var c Config
	k, err := kong.New(&c)
	if err != nil {
		panic(fmt.Sprintf("config: %v", err)) // the tags above are broken
	}
	for _, f := range k.Model.Flags {
		if !f.HasDefault {
			continue
		}
		if err := f.Parse(kong.ScanFromTokens(kong.Token{Type: kong.FlagValueToken, Value: f.Default}), f.Target); err != nil {
			panic(fmt.Sprintf("config: default of --%s: %v", f.Name, err))
		}
	}
	return c
}

// username is the contract's Username pattern. The owner's username is
// inserted at bootstrap as given, past the validator that holds every
// other username to it, so it is checked here, before anything starts.
var username = regexp.MustCompile(`^[A-Za-z0-9_.-]{2,32}$`)

// Validate checks the values; it is the one place that does.
func (c Config) Validate() error {
	var errs []error
	if err := c.Store.Validate(); err != nil {
		errs = append(errs, err)
	}
	nonNegative := map[string]float64{
		"max attachment bytes": float64(c.MaxAttachmentBytes), "rate limit": c.RateLimit,
		"event retention": float64(c.EventRetention), "event-stream heartbeat": float64(c.SSEHeartbeat),
		"shutdown timeout": float64(c.ShutdownTimeout), "drain delay": float64(c.DrainDelay),
		"request timeout": float64(c.RequestTimeout), "database timeout": float64(c.DBTimeout),
		"body idle timeout": float64(c.BodyIdleTimeout), "body minimum rate": float64(c.BodyMinRate),
		"cache bytes": float64(c.CacheBytes), "memory limit": float64(c.MemoryLimit),
	}
	for _, name := range slices.Sorted(maps.Keys(nonNegative)) {
		if nonNegative[name] < 0 {
			errs = append(errs, fmt.Errorf("the %s must not be negative", name))
		}
	}
	if c.TracingSampleRatio < 0 || c.TracingSampleRatio > 1 {
		errs = append(errs, errors.New("the tracing sample ratio must be between 0 and 1"))
	}
	if c.MaxTokensPerUser < 1 {
		errs = append(errs, errors.New("a user must be allowed at least one token"))
	}
	if c.MaxEventStreams < 1 {
		errs = append(errs, errors.New("a user must be allowed at least one event stream"))
	}
	if c.RateLimitClients < 1 {
		errs = append(errs, errors.New("the rate limiter must remember at least one client"))
	}
	if !username.MatchString(c.OwnerName) {
		errs = append(errs, fmt.Errorf("the owner's username %q must be 2 to 32 ASCII letters, digits, '_', '.' or '-'", c.OwnerName))
	}
	if c.BootstrapToken != "" && len(c.BootstrapToken) < 32 {
		errs = append(errs, errors.New("the bootstrap token must be at least 32 characters"))
	}
	if _, err := c.Proxies(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// CacheEntryLimit caps the read cache's entries on the heap (credentials,
// pages; by default a quarter of CacheBytes, at most 16 MiB) at a third of
// the memory limit, so that a limit set low bounds them with it; 0 when
// no limit is set. The rest of the cache, its users kept packed, is beside
// the limit (app.LimitMemory).
func (c Config) CacheEntryLimit() int {
	if c.MemoryLimit > 0 {
		return int(c.MemoryLimit / 3)
	}
	return 0
}

// Validate checks the store's location.
func (s Store) Validate() error {
	if s.DatabaseURL != "" && !strings.HasPrefix(s.DatabaseURL, "postgres://") && !strings.HasPrefix(s.DatabaseURL, "postgresql://") {
		return errors.New("the database URL must start with postgres://")
	}
	if s.DatabaseURL == "" && s.DataDir == "" {
		return errors.New("the data directory must be set")
	}
	return nil
}

// Proxies parses TrustedProxies; a bare address is a one-address prefix.
func (c Config) Proxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range c.TrustedProxies {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("trusted proxy %q is neither a CIDR nor an address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// DropEmptyEnv unsets the GUILDHALL_* variables that are set but empty, so
// that an empty variable means "not set" (the default applies), as it always
// has, rather than an empty value.
func DropEmptyEnv() {
	for _, kv := range os.Environ() {
		if name, value, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "GUILDHALL_") && value == "" {
			_ = os.Unsetenv(name)
		}
	}
}

// Vars lists the environment variables the configuration reads, with their
// flags (for documentation tests).
func Vars() map[string]string {
	out := map[string]string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			if env := f.Tag.Get("env"); env != "" {
				out[env] = "--" + f.Tag.Get("name")
			}
		}
	}
	walk(reflect.TypeOf(Config{}))
	return out
}

// EnvResolver makes kong read each flag's variables through env (a non-empty
// value wins over the process environment and the default; a flag on the
// command line wins over all).
func EnvResolver(env func(string) string) kong.Resolver {
	return kong.ResolverFunc(func(_ *kong.Context, _ *kong.Path, flag *kong.Flag) (any, error) {
		for _, name := range flag.Tag.Envs {
			if v := env(name); v != "" {
				return v, nil
			}
		}
		return nil, nil
	})
}

// Parse reads the server's flags (args, without the program name) over the
// environment as env reports it, and validates the result.
func Parse(name string, args []string, env func(string) string) (Config, error) {
	var c Config
	k, err := kong.New(&c, kong.Name(name), kong.Resolvers(EnvResolver(env)),
		kong.Exit(func(int) {}), kong.Writers(io.Discard, io.Discard))
	if err != nil {
		return Config{}, err
	}
	if _, err := k.Parse(args); err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}

// Env is os.Getenv, for Parse.
func Env(k string) string { return os.Getenv(k) }
