// Package chart draws the web console's small time charts as inline SVG:
// no script, nothing fetched, a viewBox that scales to the page's width.
// A chart is an image with a title and a description (role="img",
// aria-labelledby); its series differ in lightness and line style, not in
// hue alone, so it reads without colour. The numbers themselves go in a
// table beside it (the console's templates), which is what a screen reader
// or a person without the picture reads.
package chart

import (
	"encoding/xml"
	"fmt"
	"math"
	"strings"
	"time"
)

// Series is one line of a chart.
type Series struct {
	Name string
	// Values, one per step; NaN is no value (a gap in the line).
	Values []float64
}

// Chart is one picture: up to two series over the same steps. The first
// is drawn as a light area with a solid line, the second as a dark area
// with a dashed line in front of it (a part of the first: hits of
// requests, saved bytes of bytes served).
type Chart struct {
	// ID is unique on the page: the prefix of the title's and the
	// description's element ids.
	ID    string
	Title string
	Desc  string
	// Start is the beginning of the first step.
	Start time.Time
	Step  time.Duration
	// Series share the number of steps (that of the first).
	Series []Series
	// Format writes a value for the axis (default: %g).
	Format func(float64) string
	// Max is the top of the axis; 0: a round value above the largest.
	Max float64
	// Lines draws lines only, no areas (a ratio).
	Lines bool
	// TimeFormat writes the times under the axis (default "15:04").
	TimeFormat string
}

// The geometry, in viewBox units.
const (
	// About the width a chart gets (a third of a desktop page, a phone's
	// width), so 14 units of text read as a page's small print.
	width, height = 360, 190
	left, right   = 62, 10
	marginTop     = 10
	bottom        = 26
	fontSize      = 14
	plotW         = width - left - right
	plotH         = height - marginTop - bottom
)

// The series' looks: fill, stroke, dash.
var looks = [2]struct{ fill, stroke, dash string }{
	{"#c9dcf2", "#0b5cad", ""},
	{"#1f4e85", "#0a2440", "6 3"},
}

// SVG is the chart's <svg> element.
func SVG(c Chart) string {
	format := c.Format
	if format == nil {
		format = func(v float64) string { return fmt.Sprintf("%g", v) }
	}
	tf := c.TimeFormat
	if tf == "" {
		tf = "15:04"
	}
	n := 0
	if len(c.Series) > 0 {
		n = len(c.Series[0].Values)
	}
	ymax := c.Max
	if ymax <= 0 {
		largest := 0.0
		for _, s := range c.Series {
			for _, v := range s.Values {
				if !math.IsNaN(v) && !math.IsInf(v, 0) && v > largest {
					largest = v
				}
			}
		}
		ymax = niceCeil(largest)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="chart" viewBox="0 0 %d %d" width="100%%" role="img" aria-labelledby="%s-t %s-d">`,
		width, height, esc(c.ID), esc(c.ID))
	fmt.Fprintf(&b, `<title id="%s-t">%s</title><desc id="%s-d">%s</desc>`, esc(c.ID), esc(c.Title), esc(c.ID), esc(c.Desc))
	// The axis: four grid lines with their values.
	fmt.Fprintf(&b, `<g font-size="%d" font-family="system-ui, sans-serif" fill="#57606a">`, fontSize)
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		y := yOf(v, ymax)
		stroke := "#d0d7de"
		if i == 0 {
			stroke = "#1b1f24"
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`, left, width-right, y, y, stroke)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`, left-6, y, esc(format(v)))
	}
	// Times: the start, the middle and the end of the range.
	if n > 0 && c.Step > 0 {
		end := c.Start.Add(time.Duration(n) * c.Step)
		mid := c.Start.Add(end.Sub(c.Start) / 2)
		for _, t := range []struct {
			x      int
			at     time.Time
			anchor string
		}{{left, c.Start, "start"}, {left + plotW/2, mid, "middle"}, {width - right, end, "end"}} {
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="%s">%s</text>`, t.x, height-6, t.anchor, esc(t.at.UTC().Format(tf)))
		}
	}
	b.WriteString(`</g>`)
	for i, s := range c.Series {
		if i >= len(looks) {
			break
		}
		look := looks[i]
		for _, run := range runs(s.Values, n) {
			pts := make([]string, 0, len(run)+2)
			for _, j := range run {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(j, n), yOf(s.Values[j], ymax)))
			}
			line := strings.Join(pts, " ")
			if len(run) == 1 {
				// One value: a short level line across its step.
				x, y := xOf(run[0], n), yOf(s.Values[run[0]], ymax)
				half := math.Max(float64(plotW)/float64(n)/2, 2)
				line = fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x-half, y, x+half, y)
			}
			if !c.Lines {
				first, last := strings.SplitN(line, " ", 2)[0], line[strings.LastIndex(line, " ")+1:]
				fx, lx := strings.SplitN(first, ",", 2)[0], strings.SplitN(last, ",", 2)[0]
				base := fmt.Sprintf("%.1f", float64(top0()))
				fmt.Fprintf(&b, `<polygon points="%s,%s %s %s,%s" fill="%s" stroke="none"/>`, fx, base, line, lx, base, look.fill)
			}
			dash := ""
			if look.dash != "" {
				dash = fmt.Sprintf(` stroke-dasharray="%s"`, look.dash)
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`, line, look.stroke, dash)
			if len(run) == 1 {
				// A lone value would be a speck: a dot marks it.
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`, xOf(run[0], n), yOf(s.Values[run[0]], ymax), look.stroke)
			}
		}
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// runs are the index runs of values that are numbers, split at NaN.
func runs(values []float64, n int) [][]int {
	var out [][]int
	var cur []int
	for j := 0; j < n && j < len(values); j++ {
		v := values[j]
		if math.IsNaN(v) || math.IsInf(v, 0) {
			if len(cur) > 0 {
				out = append(out, cur)
				cur = nil
			}
			continue
		}
		cur = append(cur, j)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// top0 is the y of the axis' 0.
func top0() int { return marginTop + plotH }

func xOf(j, n int) float64 { return left + (float64(j)+0.5)*float64(plotW)/float64(n) }

func yOf(v, ymax float64) float64 {
	v = math.Max(0, math.Min(v, ymax))
	return float64(top0()) - v/ymax*plotH
}

// niceCeil is the smallest of 1, 2, 2.5, 5 times a power of ten that is at
// least v (at least 1), so the grid's four steps are round.
func niceCeil(v float64) float64 {
	if !(v > 1) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 4, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
