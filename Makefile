# registryd: the two commands a new user needs are `make run` and `make test`.
GO      ?= go
BIN     := bin/registryd
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse --short=11 HEAD 2>/dev/null)
LDFLAGS := -X main.version=$(VERSION) -X main.revision=$(REVISION)

.PHONY: build run test test-cluster fmt-check vet bench soak clean

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/registryd

# Starts registryd with its embedded defaults: data in ./data, the proxy on
# :8080, the admin API on 127.0.0.1:8081. The first start writes root's token
# to ./data/initial_root_token (the log line says so).
run: build
	./$(BIN) serve

# gofmt check + go vet + the race-enabled test suite, printed as go test
# prints it, then every skipped test with its message (internal/testsummary);
# then the bench's quick mode, a smoke test of every scenario (about two
# minutes; it fails when a scenario errors, its figures are not asserted).
test: fmt-check vet
	GO=$(GO) $(GO) run ./internal/testsummary -race -timeout 20m ./...
	$(GO) run ./bench -quick

# The cluster suite (docs/scale-out.md): the store suite against PostgreSQL
# and the three-node tests, with a PostgreSQL and a MinIO the tests start on
# loopback. Separate from `make test` to keep that one quick; .ci/run runs
# both. Without postgres or minio installed the tests skip (fail when CI=true).
# -count=1: the suite runs against a server, never from go test's cache.
test-cluster:
	REGISTRYD_TEST_STORE=postgres $(GO) test -race -count=1 -timeout 20m ./store/...
	$(GO) test -race -count=1 -timeout 20m -run Cluster ./itest/

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# Head-to-head benchmarks; prints ratios and writes bench/out/latest.json.
bench:
	$(GO) run ./bench

# Issue 20's soak (docs/performance.md, "Soak"): 13 minutes of misses,
# merged metadata, rules, admin writes and purges against a 256 MiB budget;
# the first 3 (the bounded caches filling) are left out of the RSS goal;
# prints a line a minute and the goals, writes bench/out/soak.json.
# SOAK_DURATION=3m SOAK_SETTLE=0 make soak for a shorter run.
SOAK_DURATION ?= 13m
SOAK_SETTLE ?= 3m
soak:
	$(GO) run ./bench -only soak -soak-duration $(SOAK_DURATION) -soak-settle $(SOAK_SETTLE) -out bench/out/soak.json

clean:
	rm -rf bin
