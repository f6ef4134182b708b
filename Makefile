# Herald build and test entry points. `make test` is the whole suite (CI runs it
# through .ci/run, which first installs what the interop and root tests need).
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build test test-short fuzz bench bench-peers clean packages package-test

all: build

build:
	mkdir -p bin
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/heraldd ./cmd/heraldd
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/herald ./cmd/herald

test:
	$(GO) vet ./...
	# One package at a time: the network-namespace and crash tests are timing
	# sensitive, and two cores shared by parallel packages make them flaky.
	# With the race detector: the broker is concurrent by design (a reader and
	# a writer goroutine per connection, admin views read by other goroutines).
	# Child processes the tests start are race-built too, and a race they
	# report fails the test (internal/testenv.RaceWatch).
	#
	# Except multicast's TestNetns_LossyLink, run without -race below: it
	# checks that a receiver behind a lossy link recovers every message within
	# the low-latency profile's 200 ms repair budget. Under -race the sender
	# and the three receiver processes are 5-10x slower, and on 2 cores shared
	# with other work the repairs miss the budget (measured: 5 failures in 5
	# runs under -race beside 6 busy loops; 1 in 5 without -race; it passes
	# under -race on an idle machine). The other netns tests, repairs
	# included, stay under -race.
	$(GO) test -race -count=1 -p 1 -timeout 30m -skip '^TestNetns_LossyLink$$' ./...
	$(GO) test -count=1 -timeout 10m -run '^TestNetns_LossyLink$$' ./multicast

test-short:
	$(GO) test -count=1 -short ./...

# Run each fuzz target for FUZZTIME (default 60s); new findings land in testdata/fuzz.
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $(FUZZTIME) ./appliance/stomp
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./multicast
	$(GO) test -run '^$$' -fuzz '^FuzzSenderStep$$' -fuzztime $(FUZZTIME) ./multicast
	$(GO) test -run '^$$' -fuzz '^FuzzReceiverCore$$' -fuzztime $(FUZZTIME) ./multicast
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeHeaders$$' -fuzztime $(FUZZTIME) ./journal
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeConfig$$' -fuzztime $(FUZZTIME) ./appliance
	$(GO) test -run '^$$' -fuzz '^FuzzParseOrigin$$' -fuzztime $(FUZZTIME) ./appliance
	$(GO) test -run '^$$' -fuzz '^FuzzParseTopicID$$' -fuzztime $(FUZZTIME) ./appliance
	$(GO) test -run '^$$' -fuzz '^FuzzSim$$' -fuzztime $(FUZZTIME) ./appliance/histcore
	$(GO) test -run '^$$' -fuzz '^FuzzWebSocketStream$$' -fuzztime $(FUZZTIME) ./appliance
	$(GO) test -run '^$$' -fuzz '^FuzzSim$$' -fuzztime $(FUZZTIME) ./appliance/queuecore
	$(GO) test -run '^$$' -fuzz '^FuzzSim$$' -fuzztime $(FUZZTIME) ./appliance/kvcore
	$(GO) test -run '^$$' -fuzz '^FuzzParseTTL$$' -fuzztime $(FUZZTIME) ./appliance/kvcore
	$(GO) test -run '^$$' -fuzz '^FuzzParseFence$$' -fuzztime $(FUZZTIME) ./appliance/lockcore
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeUsers$$' -fuzztime $(FUZZTIME) ./appliance/auth
	$(GO) test -run '^$$' -fuzz '^FuzzParsePattern$$' -fuzztime $(FUZZTIME) ./appliance/auth
	$(GO) test -run '^$$' -fuzz '^FuzzParseNft$$' -fuzztime $(FUZZTIME) ./internal/mcdoctor
	$(GO) test -run '^$$' -fuzz '^FuzzParseIGMP$$' -fuzztime $(FUZZTIME) ./internal/mcdoctor
	$(GO) test -run '^$$' -fuzz '^FuzzParseStart$$' -fuzztime $(FUZZTIME) ./appliance/streamcore
	$(GO) test -run '^$$' -fuzz '^FuzzParseAckToken$$' -fuzztime $(FUZZTIME) ./appliance/streamcore
	$(GO) test -run '^$$' -fuzz '^FuzzSim$$' -fuzztime $(FUZZTIME) ./appliance/streamcore
	$(GO) test -run '^$$' -fuzz '^FuzzStreamCatchUp$$' -fuzztime $(FUZZTIME) ./cmd/herald
	$(GO) test -run '^$$' -fuzz '^FuzzBenchScan$$' -fuzztime $(FUZZTIME) ./cmd/herald

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Every bench case against Herald, RabbitMQ (STOMP) and NATS/JetStream side by
# side, plus a bare SQLite writer for the durable cases; prints a table of
# ratios (docs/benchmarks.md). Needs root: installs and starts the peers.
# DURATION=10s RUNS=3 DRAIN_MESSAGES=100000 CASES_ONLY="drain" PEERS="nats" ...
bench-peers:
	bench/peers.sh

clean:
	rm -rf bin dist

# dist/herald_VERSION_ARCH.deb and dist/herald-VERSION.ARCH.rpm (nfpm, pinned in
# packaging/build.sh; VERSION from git describe, override with HERALD_VERSION).
packages:
	GO="$(GO)" bash packaging/build.sh

# Build the packages, then install, run and remove the .deb on this machine
# (needs root, dpkg, rpm, systemd-analyze; see packaging/packaging_test.go).
package-test:
	$(GO) test -count=1 -v -timeout 10m ./packaging
