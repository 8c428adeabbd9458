package bench

import "testing"

// BenchmarkMLPStep is the `mlp` workload's train step (see docs/benchmarks.md
// for the side-by-side run against PyTorch).
func BenchmarkMLPStep(b *testing.B) {
	w, err := NewMLP(256)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < Warmup; i++ {
		if err := w.Step(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.Step(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMLPStepIsPoolOnly checks that a steady-state step of the mlp workload
// takes every buffer from the device pool and allocates little Go heap (a
// small MLP keeps the test fast; the structure is the same).
func TestMLPStepIsPoolOnly(t *testing.T) {
	w, err := NewMLP(8)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := w.Step(); err != nil {
			t.Fatal(err)
		}
	}
	heap, misses, err := steadyState(w.RT, w.Step)
	if err != nil {
		t.Fatal(err)
	}
	if misses != 0 {
		t.Errorf("%v device allocations per steady-state step, want 0", misses)
	}
	if heap > 256<<10 {
		t.Errorf("%d heap bytes per step; the buffers must come from the pool", heap)
	}
	t.Logf("steady state: %d heap bytes/step, %v pool misses/step", heap, misses)
}

// BenchmarkGPTStep is the `gpt` workload's train step (4 layers, d=256,
// T=128, B=8, AdamW), for profiles: go test -bench GPTStep -cpuprofile.
func BenchmarkGPTStep(b *testing.B) {
	w, err := NewGPTWorkload(DefaultGPT, 8)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < Warmup; i++ {
		if err := w.Step(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := w.Step(); err != nil {
			b.Fatal(err)
		}
	}
}
