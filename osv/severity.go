package osv

import (
	"math"
	"strings"
)

// GitLab's severity words.
const (
	sevCritical = "critical"
	sevHigh     = "high"
	sevMedium   = "medium"
	sevLow      = "low"
	sevInfo     = "info"
	sevUnknown  = "unknown"
)

// severityOf is the GitLab severity of a record, the first that applies:
//  1. the database's own word (database_specific.severity: GitHub's LOW,
//     MODERATE, HIGH, CRITICAL);
//  2. the base score of a CVSS v3.0/v3.1 vector in severity[], rated as
//     CVSS v3 does (0 none → info, 0.1 low, 4.0 medium, 7.0 high, 9.0
//     critical);
//  3. the base score of a CVSS v2 vector, rated as NVD does (low below
//     4.0, medium below 7.0, high);
//  4. unknown. CVSS v4 vectors are not scored (their score is a lookup in
//     the specification's tables); GitHub's records that carry one carry
//     the word as well.
func severityOf(dbWord string, scores []recordSeverity) string {
	switch strings.ToLower(strings.TrimSpace(dbWord)) {
	case "critical":
		return sevCritical
	case "high":
		return sevHigh
	case "moderate", "medium":
		return sevMedium
	case "low":
		return sevLow
	case "none", "info", "informational":
		return sevInfo
	}
	for _, want := range []string{"CVSS_V3", "CVSS_V2"} {
		for _, s := range scores {
			if s.Type != want {
				continue
			}
			if want == "CVSS_V3" {
				if score, ok := cvss3Score(s.Score); ok {
					return rateCVSS3(score)
				}
			} else if score, ok := cvss2Score(s.Score); ok {
				return rateCVSS2(score)
			}
		}
	}
	return sevUnknown
}

func rateCVSS3(score float64) string {
	switch {
	case score >= 9.0:
		return sevCritical
	case score >= 7.0:
		return sevHigh
	case score >= 4.0:
		return sevMedium
	case score > 0:
		return sevLow
	}
	return sevInfo
}

func rateCVSS2(score float64) string {
	switch {
	case score >= 7.0:
		return sevHigh
	case score >= 4.0:
		return sevMedium
	}
	return sevLow
}

// vectorMetrics splits "CVSS:3.1/AV:N/AC:L/..." (or a v2 vector without a
// prefix) into its metrics; a metric given twice makes it invalid.
func vectorMetrics(vector string) (map[string]string, bool) {
	m := map[string]string{}
	for _, part := range strings.Split(vector, "/") {
		k, v, ok := strings.Cut(part, ":")
		if !ok {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false
		}
		m[k] = v
	}
	return m, true
}

// cvss3Score is the base score of a CVSS v3.0 or v3.1 vector (the
// specification's section 7.1 formulas, with 3.1's Roundup).
func cvss3Score(vector string) (float64, bool) {
	if !strings.HasPrefix(vector, "CVSS:3.0/") && !strings.HasPrefix(vector, "CVSS:3.1/") {
		return 0, false
	}
	m, ok := vectorMetrics(vector)
	if !ok {
		return 0, false
	}
	pick := func(k string, vals map[string]float64) (float64, bool) {
		v, ok := vals[m[k]]
		return v, ok
	}
	scope := m["S"]
	if scope != "U" && scope != "C" {
		return 0, false
	}
	pr := map[string]float64{"N": 0.85, "L": 0.62, "H": 0.27}
	if scope == "C" {
		pr = map[string]float64{"N": 0.85, "L": 0.68, "H": 0.5}
	}
	cia := map[string]float64{"H": 0.56, "L": 0.22, "N": 0}
	av, ok1 := pick("AV", map[string]float64{"N": 0.85, "A": 0.62, "L": 0.55, "P": 0.2})
	ac, ok2 := pick("AC", map[string]float64{"L": 0.77, "H": 0.44})
	p, ok3 := pick("PR", pr)
	ui, ok4 := pick("UI", map[string]float64{"N": 0.85, "R": 0.62})
	c, ok5 := pick("C", cia)
	i, ok6 := pick("I", cia)
	a, ok7 := pick("A", cia)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6 && ok7) {
		return 0, false
	}
	iss := 1 - (1-c)*(1-i)*(1-a)
	var impact float64
	if scope == "U" {
		impact = 6.42 * iss
	} else {
		impact = 7.52*(iss-0.029) - 3.25*math.Pow(iss-0.02, 15)
	}
	if impact <= 0 {
		return 0, true
	}
	expl := 8.22 * av * ac * p * ui
	if scope == "U" {
		return roundUp(math.Min(impact+expl, 10)), true
	}
	return roundUp(math.Min(1.08*(impact+expl), 10)), true
}

// roundUp is CVSS v3.1's Roundup: the smallest number of one decimal at or
// above x, computed on integers so that 4.000001 is 4.1 and 4.0 stays 4.0.
func roundUp(x float64) float64 {
	n := int64(math.Round(x * 100000))
	if n%10000 == 0 {
		return float64(n) / 100000
	}
	return float64(n/10000+1) / 10
}

// cvss2Score is the base score of a CVSS v2 vector ("AV:N/AC:L/Au:N/C:P/I:P/A:P").
func cvss2Score(vector string) (float64, bool) {
	m, ok := vectorMetrics(strings.TrimPrefix(strings.TrimSuffix(strings.TrimPrefix(vector, "("), ")"), "CVSS:2.0/"))
	if !ok {
		return 0, false
	}
	cia := map[string]float64{"N": 0, "P": 0.275, "C": 0.660}
	vals := []struct {
		k    string
		vals map[string]float64
	}{
		{"AV", map[string]float64{"L": 0.395, "A": 0.646, "N": 1.0}},
		{"AC", map[string]float64{"H": 0.35, "M": 0.61, "L": 0.71}},
		{"Au", map[string]float64{"M": 0.45, "S": 0.56, "N": 0.704}},
		{"C", cia}, {"I", cia}, {"A", cia},
	}
	var f [6]float64
	for i, v := range vals {
		x, ok := v.vals[m[v.k]]
		if !ok {
			return 0, false
		}
		f[i] = x
	}
	impact := 10.41 * (1 - (1-f[3])*(1-f[4])*(1-f[5]))
	expl := 20 * f[0] * f[1] * f[2]
	fImpact := 0.0
	if impact != 0 {
		fImpact = 1.176
	}
	score := ((0.6 * impact) + (0.4 * expl) - 1.5) * fImpact
	return math.Round(score*10) / 10, true
}
