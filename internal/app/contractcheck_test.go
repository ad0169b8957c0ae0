package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/guildhall/guildhall/internal/app"
	"github.com/guildhall/guildhall/internal/config"
)

// GUILDHALL_CONTRACT_CHECK wraps the server with the contract check (the
// CI's live runs set it and read the log): conforming answers log nothing,
// and without it the handler is Echo itself.
func TestContractCheckMode(t *testing.T) {
	for _, on := range []bool{false, true} {
		cfg := config.Default()
		cfg.DataDir = t.TempDir()
		cfg.ContractCheck = on
		var logged bytes.Buffer
		a, err := app.New(context.Background(), cfg, slog.New(slog.NewJSONHandler(&logged, nil)))
		if err != nil {
			t.Fatal(err)
		}
		if wrapped := a.Handler != http.Handler(a.HTTP.Echo); wrapped != on {
			t.Errorf("contract check %v: handler wrapped %v", on, wrapped)
		}
		for _, path := range []string{"/api/openapi.json", "/api/roles", "/api/nope", "/api/users/u/roles/a/b"} {
			rec := httptest.NewRecorder()
			a.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		}
		if strings.Contains(logged.String(), "contract violation") {
			t.Errorf("contract check %v: a conforming server logged a violation:\n%s", on, logged.String())
		}
		_ = a.Close()
	}
}
