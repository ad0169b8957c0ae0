// Command guildhall runs the Guildhall administration service.
//
//	guildhall serve [flags]                     run the server (the default)
//	guildhall token create --user NAME [flags]  print a new token for a user
//	guildhall backup --to DIR [flags]           snapshot a live store
//	guildhall restore --from DIR [flags]        restore a snapshot into an empty data directory
//	guildhall version                           print the version
//
// Every flag has a GUILDHALL_* environment variable (the flag wins); `--help`
// on any command lists them. Flags and variables are declared once, in
// internal/config, and parsed with kong.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/guildhall/guildhall/internal/app"
	"github.com/guildhall/guildhall/internal/apperr"
	"github.com/guildhall/guildhall/internal/backup"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/store"
)

func main() {
	config.DropEmptyEnv()
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "guildhall:", err)
		os.Exit(1)
	}
}

// cli is the command line: one field per command.
type cli struct {
	Serve   serveCmd   `cmd:"" default:"withargs" help:"Run the server (the default command)."`
	Token   tokenCmd   `cmd:"" help:"Manage tokens from the command line."`
	Backup  backupCmd  `cmd:"" help:"Write a consistent snapshot of a live store (the SQLite file and the attachment blobs, with a manifest of checksums) to an empty directory. On PostgreSQL, print the pg_dump command to run."`
	Restore restoreCmd `cmd:"" help:"Restore a snapshot made by backup into an empty data directory (refusing a non-empty one). On PostgreSQL, print the pg_restore command to run."`
	Version versionCmd `cmd:"" help:"Print the version."`
}

// streams are where commands write; bound into every Run.
type streams struct {
	stdout, stderr io.Writer
}

// helpShown ends a parse after --help printed its text.
type helpShown struct{}

func run(args []string, stdout, stderr io.Writer) (err error) {
	var c cli
	parser, err := kong.New(&c,
		kong.Name("guildhall"),
		kong.Description("Guildhall: the administration service of a chat community, over HTTP under /api."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(int) { panic(helpShown{}) }),
		kong.UsageOnError(),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	)
	if err != nil {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(helpShown); !ok {
				panic(r)
			}
			err = nil
		}
	}()
	ctx, err := parser.Parse(args)
	if err != nil {
		return err
	}
	return ctx.Run(&streams{stdout: stdout, stderr: stderr})
}

func logger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

type serveCmd struct {
	config.Config
}

func (s *serveCmd) Validate() error { return s.Config.Validate() }

func (s *serveCmd) Run(io *streams) error {
	cfg := s.Config
	log, flushLog := app.NewLogger(io.stderr, cfg.LogLevel)
	defer flushLog()
	if n := app.EnsureProcs(); n > 0 {
		log.Info("GOMAXPROCS raised so that a commit's sync does not stall requests", "gomaxprocs", n)
	}
	if n := app.TuneGC(); n > 0 {
		log.Info("GC target set (GOGC unset)", "gogc", n)
	}
	if n := app.LimitMemory(cfg.MemoryLimit); n > 0 {
		log.Info("soft memory limit set (GOMEMLIMIT unset)", "bytes", n, "cache_bytes", cfg.CacheBytes)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := app.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	base := "http://" + displayAddr(ln.Addr().String())
	if a.OwnerToken != "" {
		if cfg.BootstrapToken != "" {
			fmt.Fprintf(io.stdout, "Created the owner %q with the token from GUILDHALL_BOOTSTRAP_TOKEN.\n", cfg.OwnerName)
		} else {
			fmt.Fprintf(io.stdout, "Created the owner %q. Their token (shown once, keep it safe):\n\n    %s\n\n", cfg.OwnerName, a.OwnerToken)
		}
	}
	fmt.Fprintf(io.stdout, "Guildhall %s listening on %s (store: %s)\nAPI docs: %s/docs/\n", app.Version, listeningOn(ln.Addr().String()), storeName(cfg.Store), base)
	log.Info("listening", "addr", ln.Addr().String(), "version", app.Version)
	return a.Serve(ctx, ln)
}

type tokenCmd struct {
	Create tokenCreateCmd `cmd:"" help:"Print a new token for a user (the secret on stdout, once)."`
}

type tokenCreateCmd struct {
	User string `required:"" help:"Username of the token's owner."`
	Name string `default:"cli" help:"Label of the token."`
	config.Store
	config.Tokens
}

func (t *tokenCreateCmd) Validate() error {
	if t.MaxTokensPerUser < 1 {
		return errors.New("a user must be allowed at least one token")
	}
	return t.Store.Validate()
}

func (t *tokenCreateCmd) Run(io *streams) error {
	cfg := config.Default()
	cfg.Store = t.Store
	cfg.Tokens = t.Tokens // the server's limit, so the CLI cannot mint past it
	ctx := context.Background()
	// Not a serving process: app.New starts no background work, so nothing
	// here sweeps a running server's uploads or blobs.
	a, err := app.New(ctx, cfg, logger(io.stderr, "warn"))
	if err != nil {
		return err
	}
	defer a.Close()
	tok, secret, err := a.Service.IssueToken(ctx, t.User, t.Name)
	if errors.Is(err, apperr.ErrLimitExceeded) {
		// The way out when every one of them is lost (the owner's) is
		// the operator's: this command run once with a higher limit.
		return fmt.Errorf("user %q already holds the most tokens allowed (%d, --max-tokens-per-user or GUILDHALL_MAX_TOKENS_PER_USER): "+
			"revoke one first (DELETE /api/users/{userID}/tokens/{tokenID}); if none of them works any more, run this command once with a higher --max-tokens-per-user",
			t.User, t.MaxTokensPerUser)
	}
	if e, ok := apperr.As(err); ok && errors.Is(err, apperr.ErrInvalid) && len(e.Fields) == 1 && e.Fields[0].Field == "name" {
		return fmt.Errorf("--name: %s", e.Fields[0].Message) // the only field the command takes that the service checks
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(io.stdout, secret)
	fmt.Fprintf(io.stderr, "token %s for user %q\n", tok.ID, t.User)
	return nil
}

type backupCmd struct {
	To string `required:"" placeholder:"DIR" help:"Directory to write the snapshot to; it must be empty or absent."`
	config.Store
}

func (b *backupCmd) Validate() error { return b.Store.Validate() }

func (b *backupCmd) Run(io *streams) error {
	if store.IsPostgresURL(b.DatabaseURL) {
		text, err := backup.PostgresDumpInstructions(b.DatabaseURL, b.To)
		if err != nil {
			return err
		}
		fmt.Fprint(io.stdout, text)
		return nil
	}
	m, err := backup.SQLite(context.Background(), b.DataDir, b.To)
	if err != nil {
		return err
	}
	fmt.Fprintf(io.stdout, "Backed up %s to %s: the database (%d bytes) and %d attachment blobs (%d bytes); manifest %s.\n",
		b.DataDir, b.To, m.Database.Size, m.BlobCount(), m.BlobBytes(), backup.ManifestName)
	return nil
}

type restoreCmd struct {
	From string `required:"" placeholder:"DIR" help:"Directory written by guildhall backup."`
	config.Store
}

func (r *restoreCmd) Validate() error { return r.Store.Validate() }

func (r *restoreCmd) Run(io *streams) error {
	if store.IsPostgresURL(r.DatabaseURL) {
		text, err := backup.PostgresRestoreInstructions(r.DatabaseURL, r.From)
		if err != nil {
			return err
		}
		fmt.Fprint(io.stdout, text)
		return nil
	}
	m, err := backup.Restore(context.Background(), r.From, r.DataDir)
	if err != nil {
		return err
	}
	fmt.Fprintf(io.stdout, "Restored %s into %s: the database and %d attachment blobs, every checksum verified. Start the server on it with GUILDHALL_DATA_DIR=%s.\n",
		r.From, r.DataDir, m.BlobCount(), r.DataDir)
	return nil
}

type versionCmd struct{}

func (versionCmd) Run(io *streams) error {
	fmt.Fprintln(io.stdout, app.Version)
	return nil
}

// listeningOn says where the server listens: the URL, or, on every
// interface, that and how to reach it from this machine.
func listeningOn(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && (host == "" || host == "::" || host == "0.0.0.0") {
		return fmt.Sprintf("every interface, port %s (http://%s from this machine)", port, displayAddr(addr))
	}
	return "http://" + displayAddr(addr)
}

// displayAddr is an address to reach the server at from this machine.
func displayAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host == "" || host == "::" || host == "0.0.0.0" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

func storeName(s config.Store) string {
	if store.IsPostgresURL(s.DatabaseURL) {
		return "postgresql"
	}
	return "sqlite in " + s.DataDir
}
