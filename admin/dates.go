package admin

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// GitLab declares its date parameters (events' before and after, expires_at)
// as Grape's Date, which Ruby's Date.parse reads: 2016-12-1 as well as
// 2016-12-01 (GitLab's own events spec sends the unpadded form), 20161201,
// 2016/12/01, "1 Dec 2016" or an HTTP date. Date.parse also guesses at
// whatever else it is given: "12/1/2016" is December in one country and
// January in another, "2016-12" becomes the first of the month and "3" the
// third of this one. parseDate accepts the forms that name one day
// unambiguously and refuses the guesses, so a typo is a 400 rather than a
// filter on a day nobody meant.
//
// A date-time is its date as written, the zone ignored: Date.parse does the
// same, so before=2016-12-01T23:30:00-05:00 means December 1 in both.

var (
	// Year first, then month and day of one or two digits, separated by
	// "-" or "/" (the same separator twice), then optionally a time.
	ymdForm = regexp.MustCompile(`^(\d{4})([-/])(\d{1,2})([-/])(\d{1,2})(.*)$`)
	// ISO 8601's basic form: 20161201.
	basicForm = regexp.MustCompile(`^(\d{4})(\d{2})(\d{2})$`)
	// An English month name before or after the day, the year last,
	// optionally after a weekday: "1 Dec 2016", "December 1, 2016",
	// "Thu, 01 Dec 2016 10:00:00 GMT".
	dayMonthForm = regexp.MustCompile(`^(?:[a-z]{3,9},?\s+)?(\d{1,2})(?:st|nd|rd|th)?[\s-]+([a-z]{3,9})\.?,?[\s-]+(\d{4})(.*)$`)
	monthDayForm = regexp.MustCompile(`^(?:[a-z]{3,9},?\s+)?([a-z]{3,9})\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})(.*)$`)
	// What may follow a date: a time of day with optional seconds,
	// fraction and zone, after "T" or a space.
	timeTail = regexp.MustCompile(`(?i)^(?:t|\s+)(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:[.,]\d+)?)?\s*(?:[zZ]|[+-]\d{2}(?::?\d{2})?|utc|gmt)?$`)
)

var weekdays = map[string]bool{"mon": true, "tue": true, "wed": true, "thu": true, "fri": true, "sat": true, "sun": true,
	"monday": true, "tuesday": true, "wednesday": true, "thursday": true, "friday": true, "saturday": true, "sunday": true}

// parseDate reads a date parameter (see above) as midnight UTC of its day.
func parseDate(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	if len(s) > 64 {
		return time.Time{}, false
	}
	if m := ymdForm.FindStringSubmatch(s); m != nil && m[2] == m[4] {
		return civilDate(m[1], m[3], m[5], m[6])
	}
	if m := basicForm.FindStringSubmatch(s); m != nil {
		return civilDate(m[1], m[2], m[3], "")
	}
	lower := strings.ToLower(s)
	if m := dayMonthForm.FindStringSubmatch(lower); m != nil && weekdayPrefixOK(lower, m[1]) {
		if month, ok := monthNumber(m[2]); ok {
			return civilDate(m[3], month, m[1], m[4])
		}
	}
	if m := monthDayForm.FindStringSubmatch(lower); m != nil && weekdayPrefixOK(lower, m[1]) {
		if month, ok := monthNumber(m[1]); ok {
			return civilDate(m[3], month, m[2], m[4])
		}
	}
	return time.Time{}, false
}

// weekdayPrefixOK checks that what comes before the matched date, if
// anything, is a weekday name ("Thu, 01 Dec 2016").
func weekdayPrefixOK(s, first string) bool {
	prefix := strings.TrimSpace(s[:strings.Index(s, first)])
	prefix = strings.TrimSuffix(prefix, ",")
	return prefix == "" || weekdays[prefix]
}

// monthNumber reads an English month name, full or of three letters.
func monthNumber(name string) (string, bool) {
	for m := time.January; m <= time.December; m++ {
		full := strings.ToLower(m.String())
		if name == full || name == full[:3] || (m == time.September && name == "sept") {
			return strconv.Itoa(int(m)), true
		}
	}
	return "", false
}

// civilDate builds the day y-m-d, refusing days the calendar does not have
// (2016-02-30) and anything after the date but a time of day.
func civilDate(y, m, d, tail string) (time.Time, bool) {
	if tail != "" && !timeTail.MatchString(tail) {
		return time.Time{}, false
	}
	year, _ := strconv.Atoi(y)
	month, _ := strconv.Atoi(m)
	day, _ := strconv.Atoi(d)
	if month < 1 || month > 12 || day < 1 {
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, 0, 0, 0, 0, time.UTC)
	if t.Day() != day {
		return time.Time{}, false
	}
	return t, true
}
