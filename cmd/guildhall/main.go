// Command guildhall runs the Guildhall administration service.
//
//	guildhall serve [flags]                    run the server
//	guildhall token create --user NAME [flags] print a new token for a user
//	guildhall version                          print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/guildhall/guildhall/internal/app"
	"github.com/guildhall/guildhall/internal/config"
	"github.com/guildhall/guildhall/internal/store"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "guildhall:", err)
		}
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		args = []string{"serve"}
	}
	switch args[0] {
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "token":
		if len(args) < 2 || args[1] != "create" {
			return errors.New("usage: guildhall token create --user NAME")
		}
		return tokenCreate(args[2:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, app.Version)
		return nil
	default:
		return fmt.Errorf("unknown command %q (serve, token create, version)", args[0])
	}
}

func logger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

func serve(args []string, stdout, stderr io.Writer) error {
	cfg, err := config.Parse("guildhall serve", args, config.Env)
	if err != nil {
		return err
	}
	log, flushLog := app.NewLogger(stderr, cfg.LogLevel)
	defer flushLog()
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
			fmt.Fprintf(stdout, "Created the owner %q with the token from GUILDHALL_BOOTSTRAP_TOKEN.\n", cfg.OwnerName)
		} else {
			fmt.Fprintf(stdout, "Created the owner %q. Their token (shown once, keep it safe):\n\n    %s\n\n", cfg.OwnerName, a.OwnerToken)
		}
	}
	fmt.Fprintf(stdout, "Guildhall %s listening on %s (store: %s)\nAPI docs: %s/docs/\n", app.Version, base, storeName(cfg), base)
	log.Info("listening", "addr", ln.Addr().String(), "version", app.Version)
	return a.Serve(ctx, ln)
}

func tokenCreate(args []string, stdout, stderr io.Writer) error {
	var user, name string
	rest := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--user" || a == "-user":
			if i+1 < len(args) {
				user, i = args[i+1], i+1
			}
		case strings.HasPrefix(a, "--user="):
			user = strings.TrimPrefix(a, "--user=")
		case a == "--name" || a == "-name":
			if i+1 < len(args) {
				name, i = args[i+1], i+1
			}
		case strings.HasPrefix(a, "--name="):
			name = strings.TrimPrefix(a, "--name=")
		default:
			rest = append(rest, a)
		}
	}
	if user == "" {
		return errors.New("usage: guildhall token create --user NAME [--name LABEL]")
	}
	if name == "" {
		name = "cli"
	}
	cfg, err := config.Parse("guildhall token create", rest, config.Env)
	if err != nil {
		return err
	}
	ctx := context.Background()
	a, err := app.New(ctx, cfg, logger(stderr, "warn"))
	if err != nil {
		return err
	}
	defer a.Close()
	tok, secret, err := a.Service.IssueToken(ctx, user, name)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, secret)
	fmt.Fprintf(stderr, "token %s for user %q\n", tok.ID, user)
	return nil
}

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

func storeName(cfg config.Config) string {
	if store.IsPostgresURL(cfg.DatabaseURL) {
		return "postgresql"
	}
	return "sqlite in " + cfg.DataDir
}
