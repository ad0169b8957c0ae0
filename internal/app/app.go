// Package app wires an instance together: configuration, store, blob store,
// domain service, event broker and HTTP stack, and runs it until stopped.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/guildhall/guildhall/internal/blob"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/contractcheck"
	"github.com/guildhall/guildhall/internal/events"
	"github.com/guildhall/guildhall/internal/guild"
	"github.com/guildhall/guildhall/internal/httpapi"
	"github.com/guildhall/guildhall/internal/revert"
	"github.com/guildhall/guildhall/internal/store"
	"github.com/guildhall/guildhall/internal/tracing"
	"github.com/guildhall/guildhall/internal/webhook"
)

// Version is set at build time.
var Version = "dev"

// App is one Guildhall instance.
type App struct {
	Config  config.Config
	Store   *store.Store
	Service *guild.Service
	Broker  *events.Broker
	HTTP    *httpapi.Server
	// Webhooks delivers the webhooks' deliveries once Background starts
	// it; Close stops it before the store.
	Webhooks *webhook.Deliverer
	// Handler is what Serve answers with: HTTP.Echo, unless a test wraps it.
	Handler http.Handler
	// dbBlobs (PostgreSQL) or dirBlobs (SQLite) is the blob store, swept in
	// the background.
	dbBlobs  *store.DBBlobs
	dirBlobs *blob.Dir
	log      *slog.Logger
	// OwnerToken is the owner's token when this start created the owner.
	OwnerToken string
	// draining is set once the instance has been told to stop.
	draining atomic.Bool
	// tracing is the tracer provider; nil when tracing is off.
	tracing *tracing.Provider
}

// New opens the store (applying migrations), bootstraps an empty one and
// builds the HTTP stack.
func New(ctx context.Context, cfg config.Config, log *slog.Logger) (_ *App, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tp, err := tracing.New(ctx, tracing.Options{Exporter: cfg.Tracing, SampleRatio: cfg.TracingSampleRatio,
		Version: Version, Processor: cfg.SpanProcessor, Logger: log})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = tp.Shutdown(context.Background())
		}
	}()
	st, err := store.Open(ctx, store.Options{DatabaseURL: cfg.DatabaseURL, DataDir: cfg.DataDir, StatementTimeout: cfg.DBTimeout,
		CacheBytes: cfg.CacheBytes, MaxCacheEntryBytes: cfg.CacheEntryLimit(), Tracer: tp.TracerProvider()})
	if err != nil {
		return nil, err
	}
	var blobs blob.Store
	var dbBlobs *store.DBBlobs
	var dirBlobs *blob.Dir
	if st.Postgres() {
		dbBlobs = st.Blobs() // every instance reaches them
		blobs = dbBlobs
	} else if dirBlobs, err = blob.NewDir(filepath.Join(cfg.DataDir, "blobs")); err != nil {
		_ = st.Close()
		return nil, err
	} else {
		blobs = dirBlobs
	}
	broker := events.NewBroker()
	limits := guild.DefaultLimits()
	limits.MaxAttachmentBytes = cfg.MaxAttachmentBytes
	limits.MaxTokensPerUser = cfg.MaxTokensPerUser
	svc := guild.New(guild.Options{Store: st, Blobs: blobs, Limits: limits, Notifier: broker, Logger: log,
		Webhooks: guild.WebhookOptions{AllowPrivate: cfg.WebhookAllowPrivate}})
	token, err := prepareData(ctx, svc, cfg, log)
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	reg := metrics(st, broker)
	proxies, _ := cfg.Proxies() // checked by Validate
	a := &App{Config: cfg, Store: st, Service: svc, Broker: broker, dbBlobs: dbBlobs, dirBlobs: dirBlobs, log: log, OwnerToken: token,
		tracing: tp}
	a.Webhooks = webhook.NewDeliverer(webhook.DelivererOptions{Queue: st.WebhookQueue(), Audience: svc, Encode: httpapi.EventJSON,
		Signals: broker, AllowPrivate: cfg.WebhookAllowPrivate, Logger: log, Tracer: tp.TracerProvider(), Registerer: reg})
	srv, err := httpapi.New(httpapi.Options{Service: svc, Revert: revert.New(svc, st), Broker: broker, Logger: log, CORSOrigins: cfg.CORSOrigins,
		RateLimit: cfg.RateLimit, MaxEventStreams: cfg.MaxEventStreams, Heartbeat: cfg.SSEHeartbeat, Version: Version, Ready: a.Ready, Registry: reg,
		Faults: httpapi.Faults{Classify: st.Classify, RequestTimeout: cfg.RequestTimeout, DBTimeout: cfg.DBTimeout,
			BodyIdleTimeout: cfg.BodyIdleTimeout, BodyMinRate: cfg.BodyMinRate, TrustedProxies: proxies,
			RateLimitClients: cfg.RateLimitClients},
		Tracer: tp.TracerProvider()})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	a.HTTP, a.Handler = srv, srv.Echo
	if cfg.ContractCheck {
		doc, err := httpapi.LoadContract()
		if err == nil {
			var c *contractcheck.Checker
			if c, err = contractcheck.New(doc, httpapi.SchemaOptions()...); err == nil {
				a.Handler = c.Wrap(srv.Echo, func(msg string) { log.Error("contract violation", "detail", msg) })
			}
		}
		if err != nil {
			_ = st.Close()
			return nil, fmt.Errorf("contract check: %w", err)
		}
	}
	return a, nil
}

// prepareData brings the store to what the first request may find: the
// owner on an empty store (it returns the owner's new token, if any), and
// the names stored under an earlier, looser rule cleaned, since they are
// served as the contract says only once cleaned.
func prepareData(ctx context.Context, svc *guild.Service, cfg config.Config, log *slog.Logger) (string, error) {
	token, err := svc.Bootstrap(ctx, cfg.OwnerName, cfg.BootstrapToken)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	n, err := svc.CleanStoredNames(ctx)
	if err != nil {
		return "", fmt.Errorf("clean stored names: %w", err)
	}
	if n > 0 {
		log.Info("cleaned names stored under an earlier rule (see the audit log)", "names", n, "reason", guild.CleanReason)
	}
	return token, nil
}

// metrics is the registry /metrics serves: the Go runtime's and the
// process's, the store's writer and read cache, the event streams.
func metrics(st *store.Store, broker *events.Broker) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "guildhall_store_write_transactions_total",
			Help: "Write transactions (group commits) the store ran."},
			func() float64 { return float64(st.WriterStats().Transactions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "guildhall_store_writes_total",
			Help: "Writes the store ran; per transaction, the group commit's batch size."},
			func() float64 { return float64(st.WriterStats().Writes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "guildhall_store_write_reruns_total",
			Help: "Write transactions run a second time, a savepoint per write, because one of their writes failed."},
			func() float64 { return float64(st.WriterStats().Reruns) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "guildhall_store_read_cache_hits_total",
			Help: "Reads the store's read cache answered."},
			func() float64 { return float64(st.CacheStats().Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "guildhall_store_read_cache_misses_total",
			Help: "Cacheable reads the store sent to the database."},
			func() float64 { return float64(st.CacheStats().Misses) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "guildhall_store_data_version_probes_total",
			Help: "Times the read cache asked the change log what changed (once per request at most; on PostgreSQL concurrent requests share one question)."},
			func() float64 { return float64(st.CacheStats().Questions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "guildhall_store_read_cache_leased_total",
			Help: "Requests whose cached reads the read cache answered under its lease, asking nothing (PostgreSQL)."},
			func() float64 { return float64(st.CacheStats().Leased) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "guildhall_store_read_cache_resets_total",
			Help: "Times the read cache started over because the change log could not tell what changed."},
			func() float64 { return float64(st.CacheStats().Resets) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "guildhall_store_search_pages_kept_total",
			Help: "Pages of user searches the database answered with their entries alone, the read cache giving their users."},
			func() float64 { return float64(st.CacheStats().KeptSearches) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "guildhall_store_read_cache_bytes",
			Help: "Estimated size of the read cache (its entries and its packed users), bounded by its configured size."},
			func() float64 { return float64(st.CacheStats().Bytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "guildhall_event_stream_subscribers",
			Help: "Event streams (Server-Sent Events) open on this instance."},
			func() float64 { return float64(broker.Subscribers()) }))
	return reg
}

// Background starts the instance's background work until ctx ends: the
// webhooks' deliverer, the
// PostgreSQL event listener (events committed by any instance), the sweep of
// deleted database blobs, the audit-log retention, and the memory limit's
// following of the read cache's packed users.
func (a *App) Background(ctx context.Context) {
	a.Webhooks.Start(ctx)
	if a.Store.Postgres() {
		go a.Broker.ListenPostgres(ctx, a.Config.DatabaseURL, a.Store.EventChannel(), a.log)
	}
	if a.dbBlobs != nil {
		// Deleted database blobs go once their grace has passed; every
		// instance sweeps, and the deletes are idempotent.
		go a.every(ctx, 5*time.Minute, "swept deleted blobs", func(ctx context.Context) (int64, error) {
			return a.dbBlobs.Sweep(ctx, time.Now().Add(-store.BlobGrace))
		})
		go a.every(ctx, 5*time.Minute, "trashed orphaned blobs", func(ctx context.Context) (int64, error) {
			return a.dbBlobs.AdoptOrphans(ctx, time.Now())
		})
	}
	if a.dirBlobs != nil {
		// Only the serving process sweeps the blob directory: the token CLI
		// (app.New without Background) never touches a live upload.
		go a.every(ctx, 5*time.Minute, "removed temporary upload files", func(context.Context) (int64, error) {
			return a.dirBlobs.SweepTemp(blob.TempGrace)
		})
		go a.every(ctx, 5*time.Minute, "removed orphaned blobs", func(ctx context.Context) (int64, error) {
			return a.dirBlobs.SweepOrphans(ctx, blob.OrphanGrace, a.Store.ReferencedBlobs)
		})
	}
	go a.every(ctx, time.Minute, "pruned the change log", a.Store.PruneChangeLog)
	go followMemoryLimit(ctx, time.Second, func() int { return a.Store.CacheStats().UserBytes })
	if a.Config.EventRetention > 0 {
		go a.every(ctx, time.Hour, "purged events", func(ctx context.Context) (int64, error) {
			return a.Store.PurgeEvents(ctx, time.Now().Add(-a.Config.EventRetention))
		})
	}
}

// Serve answers on ln until ctx ends, then shuts down gracefully.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()
	a.Background(bg)
	if a.Config.DebugAddr != "" {
		go a.serveDebug(bg)
	}
	srv := &http.Server{Handler: a.Handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(httpapi.ProblemListener(ln)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	a.drain()
	if d := a.Config.DrainDelay; d > 0 {
		// Go on serving, with /readyz at 503, so a load balancer stops
		// sending before the listener closes.
		a.log.Info("draining", "for", d)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case err := <-errc:
			t.Stop()
			return err
		}
	}
	a.log.Info("shutting down", "grace", a.Config.ShutdownTimeout)
	a.HTTP.Shutdown() // end event streams so Shutdown does not wait on them
	sctx, cancel := context.WithTimeout(context.Background(), a.Config.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// traceFlushTimeout bounds sending the spans still buffered at Close.
const traceFlushTimeout = 5 * time.Second

// Close stops the webhooks' deliverer, releases the store, then sends the spans still buffered (within
// traceFlushTimeout) and stops the tracer provider.
func (a *App) Close() error {
	_ = a.Webhooks.Close() // its last outcomes go to the store
	err := a.Store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	return errors.Join(err, a.tracing.Shutdown(ctx))
}

// every runs a clean-up at once and then every interval until ctx ends,
// logging what it removed (n) or why it failed.
func (a *App) every(ctx context.Context, interval time.Duration, what string, clean func(context.Context) (int64, error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		n, err := clean(ctx)
		if err != nil && ctx.Err() == nil {
			a.log.Warn(what+" failed", "err", err)
		} else if n > 0 {
			a.log.Info(what, "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serveDebug serves net/http/pprof on the debug address until ctx ends.
func (a *App) serveDebug(ctx context.Context) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: a.Config.DebugAddr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	a.log.Info("debug listener (pprof)", "addr", a.Config.DebugAddr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		a.log.Warn("debug listener failed", "err", err)
	}
}
