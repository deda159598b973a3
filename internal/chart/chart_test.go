package chart

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// parse checks that svg is well-formed XML with one <svg> root, and
// returns its elements by name and its character data.
func parse(t *testing.T, svg string) (map[string][]xml.StartElement, string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	els := map[string][]xml.StartElement{}
	var text strings.Builder
	depth, roots := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			if depth == 0 {
				roots++
				if x.Name.Local != "svg" || x.Name.Space != "http://www.w3.org/2000/svg" {
					t.Fatalf("root %v", x.Name)
				}
			}
			depth++
			els[x.Name.Local] = append(els[x.Name.Local], x.Copy())
		case xml.EndElement:
			depth--
		case xml.CharData:
			text.Write(x)
			text.WriteByte('|')
		}
	}
	if roots != 1 {
		t.Fatalf("%d root elements", roots)
	}
	return els, text.String()
}

func attr(e xml.StartElement, name string) string {
	for _, a := range e.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// coords are the numbers of a points attribute, each within the viewBox.
func coords(t *testing.T, points string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, p := range strings.Fields(points) {
		xy := strings.Split(p, ",")
		if len(xy) != 2 {
			t.Fatalf("point %q", p)
		}
		x, err1 := strconv.ParseFloat(xy[0], 64)
		y, err2 := strconv.ParseFloat(xy[1], 64)
		if err1 != nil || err2 != nil || x < 0 || x > width || y < 0 || y > height {
			t.Fatalf("point %q outside the viewBox 0 0 %d %d", p, width, height)
		}
		out = append(out, [2]float64{x, y})
	}
	return out
}

var start = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

func TestSVGAccessible(t *testing.T) {
	svg := SVG(Chart{ID: "req", Title: `Requests <& "hits">`, Desc: "12 requests, 5 hits", Start: start, Step: time.Minute,
		Series: []Series{{Name: "Requests", Values: []float64{1, 5, 6}}, {Name: "Hits", Values: []float64{0, 2, 3}}}})
	els, text := parse(t, svg)
	root := els["svg"][0]
	if attr(root, "role") != "img" || attr(root, "aria-labelledby") != "req-t req-d" || attr(root, "width") != "100%" ||
		attr(root, "viewBox") != fmt.Sprintf("0 0 %d %d", width, height) {
		t.Fatalf("svg attributes: %+v", root.Attr)
	}
	if len(els["title"]) != 1 || attr(els["title"][0], "id") != "req-t" || len(els["desc"]) != 1 || attr(els["desc"][0], "id") != "req-d" {
		t.Fatalf("title and desc: %s", svg)
	}
	if !strings.Contains(text, `Requests <& "hits">|`) || !strings.Contains(text, "12 requests, 5 hits|") {
		t.Fatalf("title or desc text lost: %q", text)
	}
	// Two areas and two lines; the second line is dashed (not colour alone).
	if len(els["polygon"]) != 2 || len(els["polyline"]) != 2 {
		t.Fatalf("%d areas, %d lines", len(els["polygon"]), len(els["polyline"]))
	}
	if attr(els["polyline"][0], "stroke-dasharray") != "" || attr(els["polyline"][1], "stroke-dasharray") == "" {
		t.Fatal("the series do not differ in line style")
	}
	// Axis 0..10 (6 rounded up to 10) and the times of the range.
	for _, want := range []string{"|0|", "|2.5|", "|5|", "|10|", "10:00|", "10:01|", "10:03|"} {
		if !strings.Contains("|"+text, want) {
			t.Errorf("no %q in the labels %q", want, text)
		}
	}
	pts := coords(t, attr(els["polyline"][0], "points"))
	if len(pts) != 3 || !(pts[0][0] < pts[1][0] && pts[1][0] < pts[2][0]) || !(pts[0][1] > pts[1][1] && pts[1][1] > pts[2][1]) {
		t.Fatalf("requests' line %v does not rise left to right", pts)
	}
}

func TestSVGEmpty(t *testing.T) {
	for name, c := range map[string]Chart{
		"no series":    {ID: "a", Title: "t", Start: start, Step: time.Minute},
		"no values":    {ID: "b", Title: "t", Start: start, Step: time.Minute, Series: []Series{{Name: "x"}}},
		"all zero":     {ID: "c", Title: "t", Start: start, Step: time.Minute, Series: []Series{{Name: "x", Values: []float64{0, 0, 0}}}},
		"all no value": {ID: "d", Title: "t", Start: start, Step: time.Minute, Lines: true, Series: []Series{{Name: "x", Values: []float64{math.NaN(), math.NaN()}}}},
	} {
		t.Run(name, func(t *testing.T) {
			els, text := parse(t, SVG(c))
			if len(els["line"]) != 5 || !strings.Contains(text, "|1|") {
				t.Fatalf("no axis from 0 to 1: %d grid lines, labels %q", len(els["line"]), text)
			}
			if name == "all no value" && len(els["polyline"]) != 0 {
				t.Fatal("a line drawn without values")
			}
			for _, p := range els["polyline"] {
				coords(t, attr(p, "points"))
			}
		})
	}
}

func TestSVGOnePointAndGaps(t *testing.T) {
	els, _ := parse(t, SVG(Chart{ID: "one", Title: "t", Start: start, Step: time.Hour, Series: []Series{{Name: "x", Values: []float64{7}}}}))
	if len(els["polyline"]) != 1 || len(coords(t, attr(els["polyline"][0], "points"))) != 2 {
		t.Fatalf("one value is not drawn as a level line: %+v", els["polyline"])
	}
	if len(els["circle"]) != 1 {
		t.Fatalf("a lone value has %d dots", len(els["circle"]))
	}
	// A ratio with no value in the middle: two pieces of line, no area.
	nan := math.NaN()
	els, _ = parse(t, SVG(Chart{ID: "gap", Title: "t", Start: start, Step: time.Minute, Max: 100, Lines: true,
		Series: []Series{{Name: "ratio", Values: []float64{50, 60, nan, nan, 100, 90}}}}))
	if len(els["polyline"]) != 2 || len(els["polygon"]) != 0 {
		t.Fatalf("%d lines, %d areas", len(els["polyline"]), len(els["polygon"]))
	}
	// The top of a fixed axis: 100 sits at the top grid line.
	pts := coords(t, attr(els["polyline"][1], "points"))
	if pts[0][1] != marginTop {
		t.Fatalf("100 of 100 drawn at y %v, want %d", pts[0][1], marginTop)
	}
}

func TestSVGLargeValues(t *testing.T) {
	big := []float64{3e15, 9.2e18, 1, 0}
	els, text := parse(t, SVG(Chart{ID: "big", Title: "t", Start: start, Step: 6 * time.Hour, TimeFormat: "Jan 2",
		Series: []Series{{Name: "bytes", Values: big}, {Name: "saved", Values: []float64{math.Inf(1), 9e18, 0, 0}}},
		Format: func(v float64) string { return strconv.FormatFloat(v, 'g', 3, 64) + " B" }}))
	for _, p := range append(els["polyline"], els["polygon"]...) {
		coords(t, attr(p, "points"))
	}
	if !strings.Contains(text, "1e+19 B|") || !strings.Contains(text, "Dec 7|") || !strings.Contains(text, "Dec 8|") {
		t.Fatalf("labels %q", text)
	}
	for _, v := range []float64{0.3, 1, 1.5, 7, 24, 99, 101, 2600, 1 << 40} {
		c := niceCeil(v)
		if c < v || c > 2.5*v+1 {
			t.Errorf("niceCeil(%v) = %v", v, c)
		}
	}
}
