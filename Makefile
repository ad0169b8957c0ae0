# Guildhall. `make run` starts the server on embedded SQLite; `make test`
# runs every Go test. See README.md.

GO      ?= go
# gorm.io/driver/sqlite (mattn/go-sqlite3) needs cgo: a CGO_ENABLED=0 build
# compiles and then fails at runtime.
export CGO_ENABLED := 1
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/guildhall/guildhall/internal/app.Version=$(VERSION)

.PHONY: run build generate check-generated vet lint test test-tools test-race test-short fuzz bench load bench-http lint-spec tsclient tspackage ogen contract-version browser contract console-check ci clean

# Tools run with `go run` at pinned versions (nothing to install).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The measuring tools (make bench-http, make load) are a module of their own,
# which ./... at the root does not reach: make test-tools vets and tests it.
BENCH_MOD := tools/bench

# The binary is built, then exec'd: `go run` exits 1 when it sees Ctrl-C even
# after the server drained cleanly, and make then reports an error.
run: build ## run the server on ./data (SQLite), on 127.0.0.1:8080 unless GUILDHALL_ADDR says otherwise
	GUILDHALL_ADDR="$${GUILDHALL_ADDR:-127.0.0.1:8080}" exec bin/guildhall serve

build: ## build bin/guildhall
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/guildhall ./cmd/guildhall

generate: ## regenerate gen/ from openapi/openapi.yaml (gen/ts and web/dist only when the npm tools are installed)
	$(GO) generate ./gen/...
	@bash .ci/contract/gen-ts.sh
	@bash web/build.sh

check-generated: generate ## fail if gen/ is stale: a generated file changed, or one is new and not committed
	@git diff --exit-code --stat -- gen/ && test -z "$$(git ls-files --others --exclude-standard -- gen/)" || \
	  { git ls-files --others --exclude-standard -- gen/; echo "gen/ is stale: run 'make generate' and commit it" >&2; exit 1; }

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed" >&2; exit 1; }

test: check-generated vet test-tools ## every Go test (PostgreSQL tests skip when it is unreachable, and a line says so first)
	@$(GO) run ./internal/testenv/pgprobe
	$(GO) test -count=1 -timeout 20m ./...

test-tools: ## go vet and the unit tests of the measuring tools' module (tools/bench)
	cd $(BENCH_MOD) && $(GO) vet ./...
	cd $(BENCH_MOD) && $(GO) test -count=1 -timeout 5m ./...

lint: ## staticcheck (pinned, go run) over every package, the tools' module too; its default checks, none silenced
	$(GO) run $(STATICCHECK) ./...
	cd $(BENCH_MOD) && $(GO) run $(STATICCHECK) ./...

# The race detector where goroutines share state: the event broker, the
# write batcher (internal/sqldb), the store, the webhook delivery queue's
# concurrent claims (internal/store/webhookq), the read cache
# (internal/fresh), the authorization snapshot, the buffered log, the blob
# store, the contract check, and the HTTP tests that stream events or write
# concurrently (the whole httpapi suite is too slow under -race for every
# CI run).
RACE_PKGS := ./internal/events ./internal/sqldb ./internal/store ./internal/store/webhookq ./internal/fresh ./internal/guild ./internal/app ./internal/blob ./internal/contractcheck ./internal/permissions
RACE_HTTP := Concurrent|EventStream|SSE|Stream|Ticket|DownloadDuringReplace|Interrupted|RateLimit
test-race: ## go test -race on the packages with shared state, and the concurrent HTTP tests
	$(GO) test -race -count=1 -timeout 15m $(RACE_PKGS)
	$(GO) test -race -count=1 -timeout 15m ./internal/httpapi -run '$(RACE_HTTP)'

test-short:
	$(GO) test -count=1 -short ./...

fuzz: ## run every fuzz target of every package (go test -list '^Fuzz') for FUZZTIME each (default 20s; a count such as 60000x also works)
	@set -e; n=0; for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "=== fuzz $$pkg $$target"; n=$$((n + 1)); \
	    $(GO) test $$pkg -run '^$$' -fuzz "^$$target\$$" -fuzztime $(or $(FUZZTIME),20s); \
	  done; \
	done; echo "fuzz: $$n targets"

bench: ## Go benchmarks, then the load run
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(MAKE) load

load: ## the load run: 32 clients for LOAD_DURATION against an in-process server (SQLite)
	cd $(BENCH_MOD) && $(GO) run ./cmd/guildhall-load -duration $(or $(LOAD_DURATION),10s) -clients 32

# Side by side, in one run: bin/guildhall on SQLite and PostgreSQL and a bare
# Echo server with the same routes (the ceiling). See docs/performance.md.
bench-http: build ## the HTTP load benchmark (~10 min; BENCH_FLAGS=-quick for a smoke run, -h for the flags)
	cd $(BENCH_MOD) && $(GO) build -o ../../bin/guildhall-bench ./cmd/guildhall-bench
	bin/guildhall-bench -bin bin/guildhall $(BENCH_FLAGS)

# The contract seen from outside, with the npm tools pinned in
# .ci/contract/package-lock.json (installed by .ci/contract/setup.sh on first use).
lint-spec: ## lint openapi/openapi.yaml with Spectral (spectral:oas) and Redocly (recommended): 0 errors, 0 warnings
	bash .ci/contract/lint-spec.sh

tsclient: build ## gen/ts/schema.ts fresh; the typed openapi-fetch program type-checks (tsc --strict) and runs against a live server
	bash .ci/contract/tsclient.sh

browser: build ## Swagger UI at /docs in Debian's chromium: every operation rendered, Authorize, Try it out
	bash .ci/contract/browser.sh

tspackage: ## gen/ts is the npm package @guildhall/client: npm pack, installed and type-checked by a consumer project
	bash .ci/contract/tspackage.sh

ogen: ## a Go client from the contract with ogen (pinned, go run), which must compile and cover every operation
	bash .ci/contract/ogen.sh

contract-version: ## info.version against the latest release in openapi/releases (oasdiff, pinned, go run): no unannounced breaking change
	bash .ci/contract/versions.sh

contract: lint-spec contract-version ogen tsclient tspackage browser ## every check of the contract from outside

# The admin console (web/): type-checked against gen/ts/schema.ts, rebuilt and
# compared with the committed web/dist, then walked in Debian's chromium as
# the owner and as a moderator against bin/guildhall serve. Screenshots go to
# .ci/artifacts/console/.
console-check: ## web/dist fresh and type-checked; the console walked in a real browser (owner, moderator, 360 px)
	bash web/build.sh --check
	$(MAKE) build
	bash .ci/console/check.sh

clean:
	rm -rf bin
