# xrdmon: the two commands a new machine needs are `make run` and `make test`.
GO          ?= go
BIN         := bin/xrdmon
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck
STATICCHECK_VERSION := v0.8.2
VERSION     := $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
GOVULNCHECK := $(shell $(GO) env GOPATH)/bin/govulncheck
GOVULNCHECK_VERSION := v1.9.0
# The Go vulnerability database govulncheck checks against, built from this
# version of the golang.org/x/vulndb module (.ci/vulndb; cached in .cache/).
# Raise it to see newer reports: `go list -m golang.org/x/vulndb@latest`.
VULNDB_VERSION := v0.0.0-20261105234957-e22db6528018
VULNDB      := $(CURDIR)/.cache/vulndb/$(VULNDB_VERSION)

# The toolchain go.mod names (`toolchain` line: standard-library fixes the
# collector reaches) is fetched from the Go proxy by the go command when the
# installed one is older; installations that default to GOTOOLCHAIN=local
# (Debian's, the golang image) would ignore it. `make GOTOOLCHAIN=local`
# overrides.
export GOTOOLCHAIN := auto
LDFLAGS     := -X main.version=$(VERSION)

.PHONY: all build run test unit race browser promtool rabbitmq-plugins activemq crash hostile lint vet staticcheck vulncheck fuzz bench clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/xrdmon

# run: the collector on its embedded defaults (UDP :9930, store in ./xrdmon-data).
run: build
	./$(BIN) collect $(ARGS)

# test: formatting, vet, staticcheck, govulncheck and every test. Tests that need RabbitMQ or
# PostgreSQL skip with a message when the service is absent, and fail in CI (CI=true).
test: lint vulncheck unit race crash

unit: browser promtool rabbitmq-plugins activemq
	$(GO) test -count=1 -timeout 30m ./...

# race: the packages whose goroutines share batches, state and counters, and
# replay end to end, under the race detector (about 2 minutes).
race:
	$(GO) test -race -count=1 -timeout 20m ./internal/...
	$(GO) test -race -count=1 -timeout 10m -run 'TestReplay' ./cmd/xrdmon/

# rabbitmq-plugins: the consistent-hash exchange the bus tests shard with,
# and STOMP (port 61613) for the STOMP input and output tests (both shipped
# with RabbitMQ; enabled on the running local broker, without a restart).
rabbitmq-plugins:
	@if command -v rabbitmq-plugins >/dev/null 2>&1; then \
	  rabbitmq-plugins -q enable rabbitmq_consistent_hash_exchange >/dev/null 2>&1 \
	    || echo "could not enable rabbitmq_consistent_hash_exchange: the bus tests will skip"; \
	  rabbitmq-plugins -q enable rabbitmq_stomp >/dev/null 2>&1 \
	    || echo "could not enable rabbitmq_stomp: the STOMP tests will skip"; fi

# activemq: Debian's Apache ActiveMQ (and its Java runtime), installed with
# apt-get when missing. The STOMP tests start brokers of their own from it
# (own data directory, ports, TLS connector; killed and restarted by the
# tests), so no shared ActiveMQ service runs. Without it they skip outside
# CI and fail in CI.
activemq:
	@test -f /usr/share/activemq/bin/activemq.jar || { \
	  echo "installing activemq (the STOMP tests start brokers from it)"; \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends activemq \
	    || echo "could not install activemq: the ActiveMQ tests will skip"; }

# browser: Debian's chromium, which the dashboard's browser test drives
# headless; installed with apt-get when missing (as root, or through sudo).
# Without it the test skips outside CI and fails in CI.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium (the dashboard's browser test drives it)"; \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq chromium \
	    || echo "could not install chromium: the dashboard's browser test will skip"; }

# promtool: Prometheus's rule checker (Debian's prometheus package), which
# checks and unit-tests the alert rules in deploy/prometheus; installed with
# apt-get when missing (the daemon it brings is not started: no systemd in
# CI). Without it the test skips outside CI and fails in CI.
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  echo "installing promtool (the alert rules' test runs it)"; \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends prometheus \
	    || echo "could not install promtool: the alert rules' test will skip"; }

# crash: kill -9, RabbitMQ and PostgreSQL outages, full disk (test/crash).
# They stop the shared services and run one at a time; about 12 minutes
# on a quiet VM since the cluster tests share one workload and clean run
# and the kill tests run theirs beside the crash run (2026-11-27: 697 s,
# the whole CI 19 minutes; 30 minutes for the suite on that day's slower
# VM before): the timeout leaves room for a slow machine, CI's 90 minutes
# for all of it.
crash:
	$(GO) test -tags crash -p 1 -count=1 -timeout 60m -v ./test/crash/

# hostile: every attack of the hostile-input suite against the real binary
# (part of crash, so of make test; alone it takes about two minutes).
hostile:
	$(GO) test -tags crash -count=1 -timeout 10m -v -run TestHostileInput ./test/crash/

lint: vet staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

$(STATICCHECK):
	$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

# vulncheck: known vulnerabilities in the code the collector reaches (its
# dependencies and the standard library of the toolchain), against a copy
# of the Go vulnerability database built offline from the Go proxy's
# golang.org/x/vulndb module (about 1.5 minutes the first time, cached).
$(GOVULNCHECK):
	$(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

$(VULNDB)/index/db.json:
	bash .ci/vulndb $(VULNDB_VERSION) $(VULNDB)

vulncheck: $(GOVULNCHECK) $(VULNDB)/index/db.json
	$(GOVULNCHECK) -db file://$(VULNDB) ./...

# fuzz: run the decoder fuzzer (FUZZTIME=10m for a real session).
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzDecode -fuzztime=$(FUZZTIME) ./internal/packet

# bench: every unit benchmark (the files *_bench_test.go); some need RabbitMQ or PostgreSQL.
bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./cmd/... ./internal/...

clean:
	rm -rf bin
