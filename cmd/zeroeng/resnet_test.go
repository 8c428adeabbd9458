package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestResNetSample: samples/resnet.js, a small residual network (strided
// and 1×1 convolutions, batch norm, the input added back, adaptive
// average pooling), learns its synthetic images on 1 rank and on 2
// (DistributedDataParallel): the loss falls below chance's ln 4 = 1.386
// and the held-out accuracy above chance's 25%.
func TestResNetSample(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a ResNet for 30 steps on 1 and 2 ranks (-short skips it)")
	}
	for _, ranks := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d ranks", ranks), func(t *testing.T) {
			r := zeroeng(t, "../..", nil, "run", "--quiet", "--nproc", fmt.Sprint(ranks), "samples/resnet.js", "--",
				"--steps", "30", "--batch", "16", "--width", "8")
			if r.code != 0 {
				t.Fatalf("status %d\n%s", r.code, r.stderr)
			}
			var res struct {
				Ranks    int     `json:"ranks"`
				Loss     float64 `json:"loss"`
				Accuracy float64 `json:"accuracy"`
			}
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			last := strings.TrimPrefix(lines[len(lines)-1], "[0] ")
			if err := json.Unmarshal([]byte(last), &res); err != nil {
				t.Fatalf("%q: %v\n%s", last, err, r.stdout)
			}
			if res.Ranks != ranks || !(res.Loss < 1.25) || !(res.Accuracy > 0.35) {
				t.Errorf("after 30 steps: %+v; want the loss below 1.25 and the accuracy above 0.35", res)
			}
		})
	}
}
