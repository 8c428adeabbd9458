// Package plot owns `zeroeng plot`: it reads the JSON-lines metrics a run
// writes (--metrics) and draws the loss and throughput curves against the
// step as one self-contained SVG that a browser shows.
package plot

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Series is one metric of one run: the (step, value) points in file order.
type Series struct {
	Name string
	X, Y []float64
}

// Panel is one chart: a title and the series drawn on its axes.
type Panel struct {
	Title  string
	Series []Series
}

// lossKeys and rateKeys are the metrics drawn, in the order tried: every
// loss key present goes on the loss panel, the first throughput key
// present on the throughput panel.
var (
	lossKeys = []string{"loss", "val_loss"}
	rateKeys = []string{"tokens_per_s", "samples_per_s"}
)

// Read parses one metrics file: one JSON object per line, the step in
// "step". Lines without a step (epoch summaries, results) are skipped; a
// line that is not JSON is an error naming the file and line.
func Read(r io.Reader, name string) (loss, rate []Series, err error) {
	points := map[string]*Series{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(text), &m); err != nil {
			return nil, nil, fmt.Errorf("plot: %s:%d: not a JSON object: %v", name, line, err)
		}
		step, ok := m["step"].(float64)
		if !ok {
			continue
		}
		for _, k := range append(slices.Clone(lossKeys), rateKeys...) {
			v, ok := m[k].(float64)
			if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			s := points[k]
			if s == nil {
				s = &Series{Name: k}
				points[k] = s
			}
			s.X = append(s.X, step)
			s.Y = append(s.Y, v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("plot: %s: %w", name, err)
	}
	for _, k := range lossKeys {
		if s := points[k]; s != nil {
			loss = append(loss, *s)
		}
	}
	for _, k := range rateKeys {
		if s := points[k]; s != nil {
			rate = append(rate, *s)
			break
		}
	}
	if len(loss) == 0 && len(rate) == 0 {
		return nil, nil, fmt.Errorf("plot: %s has no lines with a step and a loss or throughput (zeroeng run --metrics writes them)", name)
	}
	return loss, rate, nil
}

// Files reads each metrics file and lays out the panels: the losses of all
// files on one, their throughputs on another. With several files each
// series is named after its file.
func Files(paths []string) ([]Panel, error) {
	loss := Panel{Title: "loss"}
	rate := Panel{Title: "throughput"}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("plot: %w", err)
		}
		l, r, err := Read(f, p)
		f.Close()
		if err != nil {
			return nil, err
		}
		name := func(s Series) Series {
			if len(paths) > 1 {
				s.Name = filepath.Base(p) + " " + s.Name
			}
			return s
		}
		for _, s := range l {
			loss.Series = append(loss.Series, name(s))
		}
		for _, s := range r {
			rate.Title = strings.ReplaceAll(s.Name, "_per_s", "/s")
			rate.Series = append(rate.Series, name(s))
		}
	}
	var panels []Panel
	for _, p := range []Panel{loss, rate} {
		if len(p.Series) > 0 {
			panels = append(panels, p)
		}
	}
	return panels, nil
}
