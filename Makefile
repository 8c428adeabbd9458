# zeroeng: the two commands a newcomer needs are `make run` and `make test`.
GO ?= go
export CGO_ENABLED ?= 0

.PHONY: build run test test-all race bench fuzz vet fmtcheck fmt hooks schedules programs gpu-check

build:
	$(GO) build -o bin/zeroeng ./cmd/zeroeng

# The quickstart: a small model learns from synthetic data on the CPU in seconds, no downloads.
run: build
	./bin/zeroeng run samples/quickstart.js

# `make test` is what a newcomer runs, in one and a half to three and a half minutes from an empty build cache on two
# cores (172, 139 and 157 s measured; 185-213 s on days the shared VM ran 30% slower; 88, 94 and 93 s on a Zen 5 EPYC): gofmt, unit tests, PyTorch numerics, the distributed conformance on the in-process
# backend and the hostile-input checks, each package compiled once. `make test-all` (what CI runs)
# adds go vet, the long suites (jobs of several processes under mpirun, launch and
# kill-and-resume, training runs on Fashion-MNIST and of the GPT and LLaMA samples, Go built for
# wasip1, the emulated GPU conformance, every kernel through NVRTC) and the race detector everywhere: vet and the race detector compile everything
# again, which doubled make test's time. For the same reason make test turns off the vet pass
# that go test runs by default (-vet=off): it vets the standard library and every dependency for
# their facts, a fifth of a cold make test's CPU, and test-all's go vet is a superset of it.
# `make race` runs the race detector on the concurrency core alone. The race detector needs cgo
# (gcc); everything else builds and tests with CGO_ENABLED=0.
RACE_CORE := ./engine/dist/... ./engine/ddp/... ./zero/... ./engine/rendezvous/... ./engine/checkpoint/... ./engine/tensor/...
RACE_ALL := ./engine/cpu/... ./engine/tensor/... ./engine/nn/... ./engine/optim/... ./engine/dist/... ./engine/ddp/... ./zero/... ./engine/checkpoint/... ./engine/trace/... ./engine/rendezvous/... ./engine/jobenv/... ./mpi/... ./hooks/... ./script/... ./cmd/...
# timed runs a command and says how long it took.
timed = t0=$$(date +%s); $(1) && echo "== $(2): $$(( $$(date +%s) - t0 )) s"

test: fmtcheck
	@$(call timed,$(GO) test -short -vet=off ./...,tests (-short))

race:
	@$(call timed,CGO_ENABLED=1 $(GO) test -race -short $(RACE_CORE),race detector on the concurrency core)

test-all: vet
	@$(call timed,$(GO) test ./...,every test)
	@$(call timed,CGO_ENABLED=1 $(GO) test -race -short $(RACE_ALL),race detector)

fmtcheck:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)

vet: fmtcheck
	$(GO) vet ./...
	cd samples/hooks/go && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	cd sdk/go && GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	cd samples/programs/go && GOWORK=off GOFLAGS=-mod=mod GOOS=wasip1 GOARCH=wasm $(GO) vet ./...

# Benchmarks report speed; see docs/benchmarks.md for the side-by-side runs.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./engine/...

# Short fuzzing pass over every parser of outside input.
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 3s ./engine/safetensors
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 3s ./engine/npy
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 3s ./engine/idx
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 3s ./engine/tokens
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 3s ./engine/torchfile
	$(GO) test -run '^$$' -fuzz FuzzCheck -fuzztime 30s -fuzzminimizetime 3s ./hooks/wasm
	$(GO) test -run '^$$' -fuzz FuzzParseOptimizer -fuzztime 30s -fuzzminimizetime 3s ./engine/checkpoint
	$(GO) test -run '^$$' -fuzz FuzzReadManifest -fuzztime 30s -fuzzminimizetime 3s ./engine/checkpoint
	$(GO) test -run '^$$' -fuzz FuzzParseSlices -fuzztime 30s -fuzzminimizetime 3s ./engine/checkpoint
	$(GO) test -run '^$$' -fuzz FuzzOptimizerLayout -fuzztime 30s -fuzzminimizetime 3s ./engine/checkpoint
	$(GO) test -run '^$$' -fuzz FuzzOptimizerShard -fuzztime 30s -fuzzminimizetime 3s ./engine/checkpoint
	$(GO) test -run '^$$' -fuzz FuzzParseFrame -fuzztime 30s -fuzzminimizetime 3s ./engine/rendezvous
	$(GO) test -run '^$$' -fuzz FuzzFromEnv -fuzztime 30s -fuzzminimizetime 3s ./engine/jobenv
	$(GO) test -run '^$$' -fuzz FuzzParseSize -fuzztime 30s -fuzzminimizetime 3s ./internal/hostmem

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

# The sample ZeRO step schedules (docs/wasm-schedule-abi.md, samples/schedules/README.md) into
# samples/schedules/build/: C without libc (clang and wasm-ld, Debian packages clang and lld).
SCHEDULES_OUT := samples/schedules/build

schedules:
	mkdir -p $(SCHEDULES_OUT)
	$(CLANG) --target=wasm32 -nostdlib -O2 -Wall -Wextra -Wl,--no-entry -o $(SCHEDULES_OUT)/lag_k.wasm samples/schedules/lag_k.c

# The sample training programs (docs/wasm-program-abi.md, samples/programs/README.md) into
# samples/programs/build/: samples/fashion_mnist.js in C over the C SDK (sdk/c; clang and wasm-ld
# with WASI's libc: Debian packages clang, lld, wasi-libc and libclang-rt-dev-wasm32), in Go
# over the Go SDK (sdk/go; its own module, samples/programs/go, built offline) and in Rust over
# the Rust SDK (sdk/rust, no crates: Debian packages rustc and libstd-rust-dev-wasm32), and
# samples/gpt.js in Rust. RUSTC is Debian's rustc, whose sysroot has the wasm32 standard library
# (a rustup rustc earlier in PATH may not); its target is wasm32-wasi, or wasm32-wasip1 where
# that is the one installed (rustc 1.78 on).
PROGRAMS_OUT := samples/programs/build
WASI_SYSROOT ?= /usr
PROGRAM_CFLAGS := --target=wasm32-wasi --sysroot=$(WASI_SYSROOT) -O2 -Wall -Wextra -I sdk/c
RUSTC ?= /usr/bin/rustc
RUST_TARGET ?= $(if $(wildcard $(shell $(RUSTC) --print sysroot)/lib/rustlib/wasm32-wasip1/lib),wasm32-wasip1,wasm32-wasi)
RUSTFLAGS_WASM := --edition 2021 --target $(RUST_TARGET) -O -C strip=debuginfo

programs:
	mkdir -p $(PROGRAMS_OUT)
	$(CLANG) $(PROGRAM_CFLAGS) -mexec-model=reactor -o $(PROGRAMS_OUT)/fashion_mnist_c.wasm samples/programs/c/fashion_mnist.c sdk/c/zeroeng.c sdk/c/zeroeng_reactor.c
	cd samples/programs/go && GOWORK=off GOFLAGS=-mod=mod GOOS=wasip1 GOARCH=wasm $(GO) vet ./...
	cd samples/programs/go && GOWORK=off GOFLAGS=-mod=mod GOOS=wasip1 GOARCH=wasm $(GO) build -o ../build/fashion_mnist_go.wasm ./fashion_mnist
	$(RUSTC) $(RUSTFLAGS_WASM) --crate-type rlib --crate-name zeroeng -o $(PROGRAMS_OUT)/libzeroeng.rlib sdk/rust/src/lib.rs
	$(RUSTC) $(RUSTFLAGS_WASM) --extern zeroeng=$(PROGRAMS_OUT)/libzeroeng.rlib -o $(PROGRAMS_OUT)/fashion_mnist_rust.wasm samples/programs/rust/fashion_mnist.rs
	$(RUSTC) $(RUSTFLAGS_WASM) --extern zeroeng=$(PROGRAMS_OUT)/libzeroeng.rlib -o $(PROGRAMS_OUT)/gpt_rust.wasm samples/programs/rust/gpt.rs

# GPU validation kit: static binaries and test binaries that a GPU machine runs without Go (gzipped),
# the script that runs them (tools/gpucheck/run.sh), the PyTorch side of the GPU benchmarks, this
# repository's Markdown (samples/gpt.js's default text) and 12,000 Fashion-MNIST training images with
# the 10,000 test images, when this machine has them (Debian's dataset-fashion-mnist): about 25 MiB,
# so that the kit and the repository travel together within a GPU lease's 64 MiB.
# On the GPU machine: build/gpu-check/run.sh bringup, then run.sh bench (docs/gpu-validation.md).
GPU_CHECK := build/gpu-check
FMNIST_DIR ?= /usr/share/datasets/fashion-mnist
FMNIST_TRAIN ?= 12000
GPU_LDFLAGS := -s -w
GPU_CHECK_MAX_KB := 40960

gpu-check:
	rm -rf $(GPU_CHECK)
	mkdir -p $(GPU_CHECK)/samples $(GPU_CHECK)/docs $(GPU_CHECK)/data/fashion-mnist
	$(GO) build -trimpath -ldflags='$(GPU_LDFLAGS)' -o $(GPU_CHECK)/zeroeng ./cmd/zeroeng
	$(GO) test -c -trimpath -ldflags='$(GPU_LDFLAGS)' -o $(GPU_CHECK)/gpu.test ./gpu
	$(GO) test -c -trimpath -ldflags='$(GPU_LDFLAGS)' -o $(GPU_CHECK)/nccl.test ./nccl
	gzip -9 $(GPU_CHECK)/zeroeng $(GPU_CHECK)/gpu.test $(GPU_CHECK)/nccl.test
	cp tools/gpucheck/run.sh bench/torch_gpu.py $(GPU_CHECK)/
	cp samples/fashion_mnist.js samples/gpt.js $(GPU_CHECK)/samples/
	cp *.md $(GPU_CHECK)/ && cp docs/*.md $(GPU_CHECK)/docs/
	if [ -d $(FMNIST_DIR) ]; then $(GO) run ./tools/gpucheck/fmnistsubset -n $(FMNIST_TRAIN) -o $(GPU_CHECK)/data/fashion-mnist $(FMNIST_DIR)/*.gz; \
	else echo "gpu-check: no Fashion-MNIST data in $(FMNIST_DIR) (Debian package dataset-fashion-mnist); the fmnist step will fail"; fi
	@kb=$$(du -sk $(GPU_CHECK) | cut -f1); echo "gpu-check: $(GPU_CHECK) is $$kb KiB"; \
	if [ $$kb -gt $(GPU_CHECK_MAX_KB) ]; then echo "gpu-check: over $(GPU_CHECK_MAX_KB) KiB: with the repository it would not fit a lease's 64 MiB"; exit 1; fi
