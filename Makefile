# Herald build and test entry points. `make test` is the whole suite (CI runs it
# through .ci/run, which first installs what the interop and root tests need).
GO      ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build test test-short fuzz bench clean

all: build

build:
	mkdir -p bin
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/heraldd ./cmd/heraldd
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/herald ./cmd/herald

test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 30m ./...

test-short:
	$(GO) test -count=1 -short ./...

# Run each fuzz target for FUZZTIME (default 60s); new findings land in testdata/fuzz.
FUZZTIME ?= 60s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $(FUZZTIME) ./appliance/stomp
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./multicast

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf bin dist
