package zeroeng

import "testing"

// The SDK's own costs in the guest, against the host:
//
//	cd sdk/go && GOOS=wasip1 GOARCH=wasm go test -run '^$' -bench . -exec <runner> ./zeroeng
//
// where the runner runs the test binary as a program: zeroeng run --quiet "$bin" -- "$@".

func BenchmarkEncode(b *testing.B) {
	t := Tensor{Handle{ID: 5, Kind: "tensor"}}
	for range b.N {
		encode([]any{t})
	}
}

func BenchmarkDecode(b *testing.B) {
	for range b.N {
		decode([]byte(`{"$":12,"type":"tensor"}`))
	}
}

func BenchmarkMethodJSON(b *testing.B) {
	t, _ := T("tensor.ones", []int{4})
	for range b.N {
		u, _ := t.M("add", t)
		u.Release()
	}
}

func BenchmarkOp(b *testing.B) {
	t, _ := T("tensor.ones", []int{4})
	for range b.N {
		u, _ := t.Op("add", t)
		u.Release()
	}
}
