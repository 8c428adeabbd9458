package testreq

import "testing"

func TestRequired(t *testing.T) {
	tests := []struct {
		gpu, nvrtc string
		need       Need
		want       bool
	}{
		{"", "", GPU, false},
		{"", "", NVRTC, false},
		{"1", "", GPU, true},
		{"1", "", NVRTC, true}, // a GPU run needs NVRTC too
		{"", "1", NVRTC, true},
		{"", "1", GPU, false},
		{"0", "", GPU, false},
	}
	for _, tt := range tests {
		t.Setenv(string(GPU), tt.gpu)
		t.Setenv(string(NVRTC), tt.nvrtc)
		if got := Required(tt.need); got != tt.want {
			t.Errorf("GPU=%q NVRTC=%q: Required(%s) = %v, want %v", tt.gpu, tt.nvrtc, tt.need, got, tt.want)
		}
	}
}
