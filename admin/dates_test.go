package admin

import (
	"testing"
	"time"
)

func TestParseDate(t *testing.T) {
	accepted := map[string]string{
		"2016-12-01": "2016-12-01",
		// GitLab's own events spec sends after=2016-12-1.
		"2016-12-1":                        "2016-12-01",
		"2016-1-5":                         "2016-01-05",
		" 2016-12-31 ":                     "2016-12-31",
		"2016/12/1":                        "2016-12-01",
		"20161201":                         "2016-12-01",
		"2016-02-29":                       "2016-02-29",
		"2016-12-01T10:00:00Z":             "2016-12-01",
		"2016-12-01t10:00:00.123456+00:00": "2016-12-01",
		"2016-12-01 10:00":                 "2016-12-01",
		"2016-12-01 10:00:00 UTC":          "2016-12-01",
		// The date as written, as Ruby's Date.parse: not its UTC day.
		"2016-12-01T23:30:00-05:00":     "2016-12-01",
		"2016-12-01T00:30:00+02:00":     "2016-12-01",
		"1 Dec 2016":                    "2016-12-01",
		"1st December 2016":             "2016-12-01",
		"01-Dec-2016":                   "2016-12-01",
		"Dec 1 2016":                    "2016-12-01",
		"December 1, 2016":              "2016-12-01",
		"sept 3 2016":                   "2016-09-03",
		"Thu, 01 Dec 2016 10:00:00 GMT": "2016-12-01",
		"Thursday, December 1, 2016":    "2016-12-01",
	}
	for in, want := range accepted {
		got, ok := parseDate(in)
		if !ok || got.Format(time.DateOnly) != want || got.Location() != time.UTC || got.Hour() != 0 {
			t.Errorf("parseDate(%q) = %v, %v; want %s", in, got, ok, want)
		}
	}
	refused := []string{
		"", "yesterday", "today", "3", "12", "2016", "2016-12", "Dec 2016",
		// Month and day in an order that depends on the country.
		"12/1/2016", "1/12/2016", "01.12.2016", "16-12-01",
		// Days the calendar does not have.
		"2016-13-01", "2016-12-00", "2016-02-30", "2015-02-29", "2016-12-32", "20161301",
		// Something else after the date.
		"2016-12-1x", "2016-12-01 garbage", "2016-12-01T", "2016-12-01T25", "2016-12-01T25:00", "2016-12-01 10:61", "2016-12-1-2",
		"2016-12/01", "1 Foo 2016", "Someday, 1 Dec 2016", "2016-W48-4", "2016-336",
		"2016-12-01T10:00:00Z" + string(make([]byte, 60)),
	}
	for _, in := range refused {
		if got, ok := parseDate(in); ok {
			t.Errorf("parseDate(%q) = %v, want refused", in, got)
		}
	}
}
