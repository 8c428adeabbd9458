package suggest

import "testing"

func TestClosest(t *testing.T) {
	known := []string{"lr", "momentum", "weightDecay", "nesterov", "startPowerSGDIter", "matrixApproximationRank"}
	tests := []struct{ key, want string }{
		{"weight_decay", "weightDecay"},
		{"start_powerSGD_iter", "startPowerSGDIter"},
		{"matrix_approximation_rank", "matrixApproximationRank"},
		{"momentm", "momentum"},
		{"Nesterov", "nesterov"},
		{"weightdecay", "weightDecay"},
		{"betas", ""},
		{"x", ""},
	}
	for _, tt := range tests {
		if got := Closest(tt.key, known); got != tt.want {
			t.Errorf("Closest(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"a", "", 1}, {"momentm", "momentum", 1}, {"kitten", "sitting", 3}, {"bais", "bias", 1}, {"dtpye", "dtype", 1}} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
