package plot

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

const (
	width       = 860
	panelHeight = 300
	left, right = 70, 20
	top, bottom = 40, 40
)

var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// SVG draws the panels one above the other, each with its axes, ticks at
// round values, one line per series and a legend, under title.
func SVG(w io.Writer, title string, panels []Panel) error {
	var b strings.Builder
	height := len(panels)*panelHeight + 30
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	for i, p := range panels {
		drawPanel(&b, p, 30+i*panelHeight)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func drawPanel(b *strings.Builder, p Panel, y0 int) {
	x0, x1 := float64(left), float64(width-right)
	yTop, yBot := float64(y0+top), float64(y0+panelHeight-bottom)
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range p.Series {
		for i := range s.X {
			xmin, xmax = math.Min(xmin, s.X[i]), math.Max(xmax, s.X[i])
			ymin, ymax = math.Min(ymin, s.Y[i]), math.Max(ymax, s.Y[i])
		}
	}
	if p.Title != "loss" {
		ymin = math.Min(ymin, 0) // throughput from zero, so that ratios read true
	}
	xticks, yticks := ticks(xmin, xmax), ticks(ymin, ymax)
	xmin, xmax = math.Min(xmin, xticks[0]), math.Max(xmax, xticks[len(xticks)-1])
	ymin, ymax = math.Min(ymin, yticks[0]), math.Max(ymax, yticks[len(yticks)-1])
	sx := func(v float64) float64 { return x0 + (v-xmin)/span(xmin, xmax)*(x1-x0) }
	sy := func(v float64) float64 { return yBot - (v-ymin)/span(ymin, ymax)*(yBot-yTop) }

	fmt.Fprintf(b, `<text x="%g" y="%g" font-weight="bold">%s</text>`+"\n", x0, yTop-10, html.EscapeString(p.Title))
	fmt.Fprintf(b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#444"/>`+"\n", x0, yTop, x1-x0, yBot-yTop)
	for _, t := range xticks {
		x := sx(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#ddd"/>`+"\n", x, yTop, x, yBot)
		fmt.Fprintf(b, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", x, yBot+16, label(t))
	}
	for _, t := range yticks {
		y := sy(t)
		fmt.Fprintf(b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x1, y)
		fmt.Fprintf(b, `<text x="%g" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", x0-6, y, label(t))
	}
	fmt.Fprintf(b, `<text x="%g" y="%g" text-anchor="middle">step</text>`+"\n", (x0+x1)/2, yBot+32)
	for i, s := range p.Series {
		color := palette[i%len(palette)]
		var pts strings.Builder
		for j := range s.X {
			fmt.Fprintf(&pts, "%.1f,%.1f ", sx(s.X[j]), sy(s.Y[j]))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, strings.TrimSpace(pts.String()))
		if len(s.X) == 1 {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", sx(s.X[0]), sy(s.Y[0]), color)
		}
		ly := yTop + 16 + float64(i)*16
		fmt.Fprintf(b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="3"/>`+"\n", x1-170, ly-4, x1-150, ly-4, color)
		fmt.Fprintf(b, `<text x="%g" y="%g">%s</text>`+"\n", x1-145, ly, html.EscapeString(s.Name))
	}
}

func span(lo, hi float64) float64 {
	if hi > lo {
		return hi - lo
	}
	return 1
}

// ticks returns about five round values (1, 2 or 5 times a power of ten)
// covering [lo, hi].
func ticks(lo, hi float64) []float64 {
	if hi <= lo {
		lo, hi = lo-1, hi+1
	}
	raw := (hi - lo) / 5
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step := pow
	for _, m := range []float64{1, 2, 5, 10} {
		if m*pow >= raw {
			step = m * pow
			break
		}
	}
	var out []float64
	start := math.Floor(lo / step)
	for k := 0.0; (start+k)*step <= hi+step*1e-9; k++ {
		// Rounded to 12 digits: 3 × 0.2 is 0.6, not 0.6000000000000001.
		v, _ := strconv.ParseFloat(strconv.FormatFloat((start+k)*step, 'g', 12, 64), 64)
		out = append(out, v)
	}
	if out[len(out)-1] < hi {
		out = append(out, out[len(out)-1]+step)
	}
	return out
}

// label formats a tick value compactly (12k for 12000).
func label(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e4:
		return trim(v/1e3) + "k"
	}
	return trim(v)
}

func trim(v float64) string {
	s := fmt.Sprintf("%.4g", v)
	if math.Abs(v) < 1e-12 {
		return "0"
	}
	return s
}
