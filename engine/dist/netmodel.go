package dist

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// NetModel emulates a network link for the in-process backend, so that the
// benefit of overlap and compression can be measured on one machine as it
// would be across nodes: a collective lasts at least
//
//	Latency + bytes × busFactor / Bandwidth
//
// where busFactor is the nccl-tests bus-bandwidth factor of the collective
// (all-reduce 2(n−1)/n; reduce-scatter, all-gather and all-to-all (n−1)/n;
// broadcast and point-to-point 1) and bytes the size nccl-tests uses (the
// whole buffer; for all-gather and reduce-scatter the gathered one).
type NetModel struct {
	Bandwidth float64 // bytes per second; 0 for infinite
	Latency   time.Duration
}

// Cost is how long the collective kind over bytes (this rank's tensor: the
// block for the block collectives) would take on the link among n ranks.
func (m NetModel) Cost(kind opKind, bytes, n int) time.Duration {
	if n < 2 || kind == opBarrier {
		if kind == opBarrier && n > 1 {
			return m.Latency
		}
		return 0
	}
	total := float64(bytes)
	factor := 1.0
	nf := float64(n)
	switch kind {
	case opAllReduce:
		factor = 2 * (nf - 1) / nf
	case opReduceScatter, opAllGather, opAllGatherInto:
		total *= nf // the gathered buffer
		factor = (nf - 1) / nf
	case opAllToAll:
		factor = (nf - 1) / nf
	}
	d := m.Latency
	if m.Bandwidth > 0 {
		d += time.Duration(total * factor / m.Bandwidth * float64(time.Second))
	}
	return d
}

// String writes the model as ParseNetModel reads it.
func (m NetModel) String() string {
	if m.Bandwidth == 0 && m.Latency == 0 {
		return "none"
	}
	return fmt.Sprintf("%sbit,%v", strconv.FormatFloat(m.Bandwidth*8/1e9, 'g', -1, 64)+"G", m.Latency)
}

// ParseNetModel reads "BANDWIDTH,LATENCY" as the --net flag gives it:
// "10Gbit,20us", "100Gbit,5us", "25Gbit" (no latency), "1GB,1ms" (bytes
// per second), or "none". Units: bit, Kbit, Mbit, Gbit, Tbit (bits per
// second, decimal) or B, KB, MB, GB (bytes per second); latencies as Go
// durations (20us, 1.5ms).
func ParseNetModel(s string) (NetModel, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return NetModel{}, nil
	}
	bw, lat, _ := strings.Cut(s, ",")
	var m NetModel
	bad := func(format string, args ...any) (NetModel, error) {
		return NetModel{}, fmt.Errorf("dist: network model %q: "+format+` (want BANDWIDTH[,LATENCY], e.g. "10Gbit,20us")`, append([]any{s}, args...)...)
	}
	bw = strings.TrimSpace(bw)
	units := []struct {
		suffix string
		scale  float64 // bytes per second per unit
	}{
		{"Tbit", 1e12 / 8}, {"Gbit", 1e9 / 8}, {"Mbit", 1e6 / 8}, {"Kbit", 1e3 / 8}, {"bit", 1.0 / 8},
		{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1},
	}
	found := false
	for _, u := range units {
		if num, ok := strings.CutSuffix(bw, u.suffix); ok {
			x, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || x <= 0 {
				return bad("bandwidth %q is not a positive number of %s", bw, u.suffix)
			}
			m.Bandwidth = x * u.scale
			found = true
			break
		}
	}
	if !found {
		return bad("bandwidth %q has no unit (Gbit, Mbit, GB, ...)", bw)
	}
	if lat = strings.TrimSpace(lat); lat != "" {
		d, err := time.ParseDuration(lat)
		if err != nil || d < 0 {
			return bad("latency %q is not a duration", lat)
		}
		m.Latency = d
	}
	return m, nil
}
