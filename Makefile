# zeroeng: the two commands a newcomer needs are `make run` and `make test`.
GO ?= go
export CGO_ENABLED ?= 0

.PHONY: build run test test-race bench fuzz vet fmt hooks gpu-check

build:
	$(GO) build -o bin/zeroeng ./cmd/zeroeng

# The quickstart: a small model learns from synthetic data on the CPU in seconds, no downloads.
run: build
	./bin/zeroeng run samples/quickstart.js

# The race detector needs cgo (gcc); everything else builds and tests with CGO_ENABLED=0.
test: vet
	$(GO) test ./...
	CGO_ENABLED=1 $(GO) test -race -short ./engine/cpu/... ./engine/tensor/... ./engine/nn/... ./engine/optim/... ./engine/dist/... ./engine/ddp/... ./engine/zero/... ./engine/checkpoint/... ./engine/trace/... ./engine/rendezvous/... ./engine/jobenv/... ./mpi/... ./hooks/... ./script/... ./cmd/...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	cd samples/hooks/go && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...

# Benchmarks report speed; see docs/benchmarks.md for the side-by-side runs.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./engine/...

# Short fuzzing pass over every parser of outside input.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 3s ./engine/safetensors
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 3s ./engine/npy
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 3s ./engine/idx
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 3s ./engine/tokens
	$(GO) test -run '^$$' -fuzz FuzzCheck -fuzztime 30s -fuzzminimizetime 3s ./hooks/wasm
	$(GO) test -run '^$$' -fuzz FuzzParseOptimizer -fuzztime 30s -fuzzminimizetime 3s ./engine/checkpoint
	$(GO) test -run '^$$' -fuzz FuzzReadManifest -fuzztime 30s -fuzzminimizetime 3s ./engine/checkpoint
	$(GO) test -run '^$$' -fuzz FuzzParseFrame -fuzztime 30s -fuzzminimizetime 3s ./engine/rendezvous
	$(GO) test -run '^$$' -fuzz FuzzFromEnv -fuzztime 30s -fuzzminimizetime 3s ./engine/jobenv

# The sample Wasm comm hooks (docs/wasm-hook-abi.md, samples/hooks/README.md) into
# samples/hooks/build/: Go (its own module, so that ./... above never sees wasm-only code),
# WAT (wat2wasm, Debian package wabt) and C (clang and wasm-ld, Debian packages clang and lld).
HOOKS_OUT := samples/hooks/build
GO_HOOKS := allreduce bf16 topk logstats codec
WAT2WASM ?= wat2wasm
CLANG ?= clang

hooks:
	mkdir -p $(HOOKS_OUT)
	cd samples/hooks/go && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	for h in $(GO_HOOKS); do \
		(cd samples/hooks/go && GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -o ../build/$$h.wasm ./$$h) || exit 1; \
	done
	$(WAT2WASM) samples/hooks/wat/allreduce.wat -o $(HOOKS_OUT)/allreduce_wat.wasm
	$(CLANG) --target=wasm32 -nostdlib -O2 -Wall -Wextra -Wl,--no-entry -o $(HOOKS_OUT)/codec_c.wasm samples/hooks/c/codec.c

# GPU validation kit: static binaries and test binaries that a GPU machine runs without Go, the
# script that runs them (tools/gpucheck/run.sh), the PyTorch side of the GPU benchmarks and the
# Fashion-MNIST data when this machine has it. Copy build/gpu-check to the GPU machine and run
# build/gpu-check/run.sh there; docs/gpu-validation.md records what it showed.
GPU_CHECK := build/gpu-check
FMNIST_DIR ?= /usr/share/datasets/fashion-mnist
GPU_LDFLAGS := -s -w

gpu-check:
	rm -rf $(GPU_CHECK)
	mkdir -p $(GPU_CHECK)/samples $(GPU_CHECK)/data/fashion-mnist
	$(GO) build -trimpath -ldflags='$(GPU_LDFLAGS)' -o $(GPU_CHECK)/zeroeng ./cmd/zeroeng
	$(GO) test -c -trimpath -ldflags='$(GPU_LDFLAGS)' -o $(GPU_CHECK)/gpu.test ./gpu
	$(GO) test -c -trimpath -ldflags='$(GPU_LDFLAGS)' -o $(GPU_CHECK)/cuda.test ./gpu/cuda
	$(GO) test -c -trimpath -ldflags='$(GPU_LDFLAGS)' -o $(GPU_CHECK)/nccl.test ./nccl
	cp tools/gpucheck/run.sh bench/torch_gpu.py $(GPU_CHECK)/
	cp samples/fashion_mnist.js samples/gpt.js $(GPU_CHECK)/samples/
	if [ -d $(FMNIST_DIR) ]; then cp $(FMNIST_DIR)/*.gz $(GPU_CHECK)/data/fashion-mnist/; \
	else echo "gpu-check: no Fashion-MNIST data in $(FMNIST_DIR) (Debian package dataset-fashion-mnist); the fmnist step will fail"; fi
	du -sh $(GPU_CHECK)
