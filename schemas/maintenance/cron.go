package maintenance

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Cron is a parsed standard 5-field cron expression (minute hour
// day-of-month month day-of-week) read in a location's wall clock, as
// Gardener's hibernation schedules are. Fields take *, numbers, ranges
// (a-b), steps (*/n, a-b/n), lists (a,b) and the names JAN–DEC and
// SUN–SAT (0 and 7 are both Sunday). When both day-of-month and
// day-of-week are restricted, a day matching either matches (Vixie cron).
//
// Daylight saving time: a wall-clock time that does not exist (02:30 on
// the night the clocks spring forward) fires at the instant the gap ends
// (03:00 local); a time that happens twice (02:30 on the night they fall
// back) fires once, at its first occurrence.
type Cron struct {
	minute, hour, dom, month, dow uint64 // bit i set: value i matches
	domStar, dowStar              bool
	loc                           *time.Location
	expr                          string
}

var (
	monthNames = map[string]int{"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6, "JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12}
	dayNames   = map[string]int{"SUN": 0, "MON": 1, "TUE": 2, "WED": 3, "THU": 4, "FRI": 5, "SAT": 6}
)

// ParseCron parses expr in loc (nil: UTC). Its error says which field is
// wrong and what is allowed.
func ParseCron(expr string, loc *time.Location) (*Cron, error) {
	if loc == nil {
		loc = time.UTC
	}
	f := strings.Fields(expr)
	if len(f) != 5 {
		return nil, fmt.Errorf("%q has %d fields: want 5 (minute hour day-of-month month day-of-week), e.g. \"0 19 * * MON-FRI\"", expr, len(f))
	}
	c := &Cron{loc: loc, expr: expr}
	var err error
	if c.minute, err = field(f[0], "minute", 0, 59, nil); err != nil {
		return nil, err
	}
	if c.hour, err = field(f[1], "hour", 0, 23, nil); err != nil {
		return nil, err
	}
	if c.dom, err = field(f[2], "day-of-month", 1, 31, nil); err != nil {
		return nil, err
	}
	if c.month, err = field(f[3], "month", 1, 12, monthNames); err != nil {
		return nil, err
	}
	if c.dow, err = field(f[4], "day-of-week", 0, 7, dayNames); err != nil {
		return nil, err
	}
	if c.dow&(1<<7) != 0 {
		c.dow |= 1
	}
	c.domStar, c.dowStar = f[2] == "*" || f[2] == "?", f[4] == "*" || f[4] == "?"
	return c, nil
}

// String is the expression as parsed.
func (c *Cron) String() string { return c.expr }

func field(s, name string, lo, hi int, names map[string]int) (uint64, error) {
	var bits uint64
	bad := func(why string) error {
		return fmt.Errorf("%s field %q: %s (allowed: *, %d-%d, ranges a-b, steps */n, lists a,b%s)", name, s, why, lo, hi, namesHint(names))
	}
	for _, part := range strings.Split(s, ",") {
		rng, stepS, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepS)
			if err != nil || n < 1 {
				return 0, bad("step " + strconv.Quote(stepS) + " is not a positive number")
			}
			step = n
		}
		a, b := lo, hi
		switch {
		case rng == "*" || rng == "?":
		case rng == "":
			return 0, bad("empty item")
		default:
			as, bs, isRange := strings.Cut(rng, "-")
			var err error
			if a, err = value(as, names); err != nil {
				return 0, bad(err.Error())
			}
			b = a
			if isRange {
				if b, err = value(bs, names); err != nil {
					return 0, bad(err.Error())
				}
			} else if hasStep {
				b = hi
			}
			if a < lo || b > hi || a > hi || b < lo {
				return 0, bad(fmt.Sprintf("out of range %d-%d", lo, hi))
			}
			if a > b {
				return 0, bad(fmt.Sprintf("range %d-%d runs backwards", a, b))
			}
		}
		for i := a; i <= b; i += step {
			bits |= 1 << uint(i)
		}
	}
	return bits, nil
}

func value(s string, names map[string]int) (int, error) {
	if v, ok := names[strings.ToUpper(s)]; ok {
		return v, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return n, nil
}

func namesHint(names map[string]int) string {
	switch len(names) {
	case 12:
		return ", JAN-DEC"
	case 7:
		return ", SUN-SAT (0 and 7: Sunday)"
	}
	return ""
}

func (c *Cron) dayMatches(y int, m time.Month, d int) bool {
	if c.month&(1<<uint(m)) == 0 {
		return false
	}
	wd := time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday()
	domOK, dowOK := c.dom&(1<<uint(d)) != 0, c.dow&(1<<uint(wd)) != 0
	switch {
	case c.domStar && c.dowStar:
		return true
	case c.domStar:
		return dowOK
	case c.dowStar:
		return domOK
	}
	return domOK || dowOK
}

// firings calls fn with the instants the expression fires on the local
// calendar day (y, m, d), in ascending order, until fn returns false.
func (c *Cron) firings(y int, m time.Month, d int, fn func(time.Time) bool) bool {
	if !c.dayMatches(y, m, d) {
		return true
	}
	var last time.Time
	for h := 0; h < 24; h++ {
		if c.hour&(1<<uint(h)) == 0 {
			continue
		}
		for mi := 0; mi < 60; mi++ {
			if c.minute&(1<<uint(mi)) == 0 {
				continue
			}
			t := WallTime(y, m, d, h, mi, c.loc)
			if !last.IsZero() && !t.After(last) {
				continue // several times in one gap fire once
			}
			last = t
			if !fn(t) {
				return false
			}
		}
	}
	return true
}

// horizon bounds a search: an expression that never fires (Feb 30) finds
// nothing within it.
const horizon = 5 * 366

// Next is the first instant strictly after t the expression fires; ok is
// false when it does not fire within five years.
func (c *Cron) Next(t time.Time) (next time.Time, ok bool) {
	lt := t.In(c.loc)
	y, m, d := lt.Date()
	for i := -1; i <= horizon; i++ {
		day := time.Date(y, m, d+i, 12, 0, 0, 0, time.UTC)
		c.firings(day.Year(), day.Month(), day.Day(), func(f time.Time) bool {
			if f.After(t) {
				next, ok = f, true
				return false
			}
			return true
		})
		if ok {
			return next, true
		}
	}
	return time.Time{}, false
}

// Prev is the last instant at or before t the expression fired; ok is
// false when it did not fire within five years.
func (c *Cron) Prev(t time.Time) (prev time.Time, ok bool) {
	lt := t.In(c.loc)
	y, m, d := lt.Date()
	for i := 1; i >= -horizon; i-- {
		day := time.Date(y, m, d+i, 12, 0, 0, 0, time.UTC)
		c.firings(day.Year(), day.Month(), day.Day(), func(f time.Time) bool {
			if !f.After(t) {
				prev, ok = f, true
			}
			return true
		})
		if ok {
			return prev, true
		}
	}
	return time.Time{}, false
}

// WallTime is the instant the wall clock of loc shows y-m-d h:mi: in a
// spring-forward gap, the instant the gap ends; when the time happens
// twice, its first occurrence.
func WallTime(y int, m time.Month, d, h, mi int, loc *time.Location) time.Time {
	t := time.Date(y, m, d, h, mi, 0, 0, loc)
	if t.Hour() != h || t.Minute() != mi {
		// A gap: the wall time does not exist. It ends where the zone t
		// is in begins.
		start, _ := t.ZoneBounds()
		if !start.IsZero() {
			return start
		}
		return t
	}
	// An overlap: an earlier instant with the same wall clock is the
	// first occurrence (offsets change by at most a few hours).
	for _, back := range []time.Duration{30 * time.Minute, time.Hour, 2 * time.Hour} {
		e := t.Add(-back)
		if eh, emi := e.Hour(), e.Minute(); eh == h && emi == mi && e.Day() == d {
			return e
		}
	}
	return t
}
