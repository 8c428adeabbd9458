# zeroeng: the two commands a newcomer needs are `make run` and `make test`.
GO ?= go
export CGO_ENABLED ?= 0

.PHONY: build run test test-race bench fuzz vet fmt

build:
	$(GO) build -o bin/zeroeng ./cmd/zeroeng

# The quickstart: a small model learns from synthetic data on the CPU in seconds, no downloads.
run: build
	./bin/zeroeng run samples/quickstart.js

# The race detector needs cgo (gcc); everything else builds and tests with CGO_ENABLED=0.
test: vet
	$(GO) test ./...
	CGO_ENABLED=1 $(GO) test -race -short ./engine/cpu/... ./engine/tensor/... ./engine/nn/... ./engine/optim/... ./engine/dist/... ./engine/ddp/... ./engine/zero/... ./script/... ./cmd/...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...

# Benchmarks report speed; see docs/benchmarks.md for the side-by-side runs.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./engine/...

# Short fuzzing pass over every parser of outside input.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 3s ./engine/safetensors
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 3s ./engine/npy
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 3s ./engine/idx
