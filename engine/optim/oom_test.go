package optim

import (
	"strings"
	"testing"

	"github.com/zeroeng/zeroeng/engine/cpu"
	"github.com/zeroeng/zeroeng/engine/tensor"
)

// TestStateOutOfMemory: a step whose state cannot be made (the device's
// memory limit) fails with that error and leaves the state unmade, for
// every algorithm that makes state tensors in its step.
func TestStateOutOfMemory(t *testing.T) {
	for _, c := range []struct {
		kind  Kind
		g     ParamGroup
		limit int64 // the parameter and the gradient take 8 KiB
	}{
		{AdamW, DefaultAdamW().Group(), 3 * 4096}, // exp_avg fits, exp_avg_sq does not
		{SGD, SGDConfig{LR: 0.1, Momentum: 0.9}.Group(), 2 * 4096},
	} {
		rt := tensor.NewRuntime(cpu.New(cpu.Options{MaxMemory: c.limit}), 0)
		p := rt.Zeros(tensor.Float32, 1024).Persist()
		g := rt.Ones(tensor.Float32, 1024).Persist()
		states := []*State{nil}
		err := Update(c.kind, &c.g, []*tensor.Tensor{p}, []*tensor.Tensor{g}, states)
		if err == nil || !strings.Contains(err.Error(), "out of memory") {
			t.Fatalf("%v: %v", c.kind, err)
		}
		if s := states[0]; s != nil && len(s.Tensors()) != 0 {
			t.Errorf("%v: state %v kept after the failure", c.kind, s.Tensors())
		}
	}
}
