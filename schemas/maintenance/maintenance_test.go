package maintenance

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the DST tests need Europe/Berlin on any machine

	"pgregory.net/rapid"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func berlin(t testing.TB) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// In 2026 Europe/Berlin springs forward on Sunday 29 March (02:00 CET →
// 03:00 CEST, 01:00 UTC) and falls back on Sunday 25 October (03:00 CEST
// → 02:00 CET, 01:00 UTC).
func TestCronAcrossDST(t *testing.T) {
	loc := berlin(t)
	tests := []struct {
		name, expr string
		after      string
		want       []string // the next firings, UTC
	}{
		{"02:30 daily, spring forward fires when the gap ends", "30 2 * * *", "2026-03-27T12:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"02:30 daily, fall back fires once, the first time", "30 2 * * *", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"several times in the gap fire once", "0,15,30,45 2 29 3 *", "2026-03-28T00:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2027-03-29T00:00:00Z"}},
		{"office hours wake 08:00 Mon-Fri across the spring change", "0 8 * * MON-FRI", "2026-03-27T12:00:00Z",
			[]string{"2026-03-30T06:00:00Z", "2026-03-31T06:00:00Z"}},
		{"evening 19:00 across the autumn change", "0 19 * * *", "2026-10-24T12:00:00Z",
			[]string{"2026-10-24T17:00:00Z", "2026-10-25T18:00:00Z"}},
		{"day of month or day of week", "0 0 1 * SUN", "2026-03-27T12:00:00Z",
			[]string{"2026-03-28T23:00:00Z", "2026-03-31T22:00:00Z", "2026-04-04T22:00:00Z"}},
		{"steps and 7 as Sunday", "*/20 9 * * 7", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T07:00:00Z", "2026-03-29T07:20:00Z", "2026-03-29T07:40:00Z", "2026-04-05T07:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseCron(tt.expr, loc)
			if err != nil {
				t.Fatal(err)
			}
			at := utc(tt.after)
			for i, w := range tt.want {
				next, ok := c.Next(at)
				if !ok || !next.Equal(utc(w)) {
					t.Fatalf("firing %d after %s: got %s (ok %v), want %s", i, at.UTC().Format(time.RFC3339), next.UTC().Format(time.RFC3339), ok, w)
				}
				if prev, ok := c.Prev(next); !ok || !prev.Equal(next) {
					t.Errorf("Prev(%s) = %s, want the firing itself", next.UTC(), prev.UTC())
				}
				if prev, ok := c.Prev(next.Add(-time.Nanosecond)); ok && prev.After(at) {
					t.Errorf("Prev just before %s is %s: a firing after %s was skipped", next.UTC(), prev.UTC(), at.UTC())
				}
				at = next
			}
		})
	}
}

func TestParseCronErrors(t *testing.T) {
	tests := []struct{ expr, want string }{
		{"0 8 * *", "has 4 fields: want 5"},
		{"60 8 * * *", `minute field "60": out of range 0-59`},
		{"0 24 * * *", `hour field "24": out of range 0-23`},
		{"0 8 0 * *", `day-of-month field "0": out of range 1-31`},
		{"0 8 * FOO *", `month field "FOO": "FOO" is not a number`},
		{"0 8 * * FRI-MON", `day-of-week field "FRI-MON": range 5-1 runs backwards`},
		{"0 8 * * */0", `step "0" is not a positive number`},
		{"0 8 ,1 * *", `day-of-month field ",1": empty item`},
	}
	for _, tt := range tests {
		_, err := ParseCron(tt.expr, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseCron(%q) = %v, want an error with %q", tt.expr, err, tt.want)
		}
	}
}

func TestWindowsAcrossDST(t *testing.T) {
	sun := func(start, end string) *capnv1.MaintenanceSpec {
		return &capnv1.MaintenanceSpec{Windows: []*capnv1.MaintenanceWindow{{Days: []string{"Sun"}, Start: start, End: end, TimeZone: "Europe/Berlin"}}}
	}
	tests := []struct {
		name     string
		spec     *capnv1.MaintenanceSpec
		now      string
		open     bool
		next     string
		openedAt string // for an open window: its opening (checked with NextOpen of a moment before)
	}{
		{"spring: 02:30-04:00 opens when the gap ends", sun("02:30", "04:00"), "2026-03-28T12:00:00Z", false, "2026-03-29T01:00:00Z", ""},
		{"spring: open from 03:00 CEST", sun("02:30", "04:00"), "2026-03-29T01:00:00Z", true, "2026-03-29T02:00:00Z", ""},
		{"spring: a 02:00-04:00 window lasts one hour", sun("02:00", "04:00"), "2026-03-29T01:59:59Z", true, "2026-03-29T02:00:00Z", ""},
		{"autumn: 02:30 opens at its first occurrence", sun("02:30", "04:00"), "2026-10-24T12:00:00Z", false, "2026-10-25T00:30:00Z", ""},
		{"autumn: a 02:00-04:00 window lasts three hours", sun("02:00", "04:00"), "2026-10-25T02:59:00Z", true, "2026-10-25T03:00:00Z", ""},
		{"closed just after: next Sunday", sun("02:00", "04:00"), "2026-10-25T03:00:00Z", false, "2026-11-01T01:00:00Z", ""},
		{"wraps midnight: Fri 22:00 to Sat 02:00", &capnv1.MaintenanceSpec{Windows: []*capnv1.MaintenanceWindow{{Days: []string{"Fri"}, Start: "22:00", End: "02:00"}}},
			"2026-12-05T01:00:00Z", true, "2026-12-05T02:00:00Z", ""},
		{"overlapping windows count as one", &capnv1.MaintenanceSpec{Windows: []*capnv1.MaintenanceWindow{
			{Start: "01:00", End: "03:00"}, {Start: "02:00", End: "05:00"}}}, "2026-12-05T01:30:00Z", true, "2026-12-05T05:00:00Z", ""},
		{"no windows: always open", &capnv1.MaintenanceSpec{}, "2026-12-05T01:30:00Z", true, "", ""},
		{"nil spec: always open", nil, "2026-12-05T01:30:00Z", true, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			open, next := Open(tt.spec, utc(tt.now))
			var want time.Time
			if tt.next != "" {
				want = utc(tt.next)
			}
			if open != tt.open || !next.Equal(want) {
				t.Errorf("Open at %s = %v, %s; want %v, %s", tt.now, open, next.UTC(), tt.open, want.UTC())
			}
		})
	}
}

func TestParseWindowErrors(t *testing.T) {
	spec := &capnv1.MaintenanceSpec{Windows: []*capnv1.MaintenanceWindow{
		{Days: []string{"Mon", "Funday"}, Start: "2:00", End: "24:00", TimeZone: "Mars/Olympus"},
		{Start: "01:00", End: "02:00"},
	}}
	_, errs := ParseWindows(spec)
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	want := []string{
		`windows[0].days[1]: "Funday" is not a day: want one of Mon, Tue, Wed, Thu, Fri, Sat, Sun`,
		`windows[0].start: "2:00" is not a time: want HH:MM, 00:00 to 23:59`,
		`windows[0].end: "24:00" is not a time: want HH:MM, 00:00 to 23:59`,
		`windows[0].timeZone: "Mars/Olympus" is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if open, _ := Open(spec, time.Now()); open {
		t.Error("an invalid spec must read as closed")
	}
}

// genSpec draws one to three windows in zones with and without DST.
func genSpec(t *rapid.T) *capnv1.MaintenanceSpec {
	zones := []string{"", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"}
	spec := &capnv1.MaintenanceSpec{}
	for i := range rapid.IntRange(1, 3).Draw(t, "windows") {
		_ = i
		w := &capnv1.MaintenanceWindow{TimeZone: rapid.SampledFrom(zones).Draw(t, "zone")}
		for _, d := range DayNames {
			if rapid.Bool().Draw(t, "day") {
				w.Days = append(w.Days, d)
			}
		}
		hm := func(label string) string {
			return time.Date(0, 1, 1, rapid.IntRange(0, 23).Draw(t, label+"h"), rapid.SampledFrom([]int{0, 15, 30, 45}).Draw(t, label+"m"), 0, 0, time.UTC).Format("15:04")
		}
		w.Start, w.End = hm("start"), hm("end")
		spec.Windows = append(spec.Windows, w)
	}
	return spec
}

// The window's answer is consistent: the state holds until next and
// changes at next, and something opens within a week.
func TestWindowsProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		spec := genSpec(t)
		// instants around 2026, DST changes included
		now := time.Unix(rapid.Int64Range(1767225600, 1798761600).Draw(t, "now"), 0).UTC()
		open, next := Open(spec, now)
		if next.IsZero() {
			// Only windows that never close have no next transition.
			for _, d := range []time.Duration{time.Hour, 25 * time.Hour, 100 * time.Hour, 170 * time.Hour} {
				if o, _ := Open(spec, now.Add(d)); !o || !open {
					t.Fatalf("windows %v: no next transition after %s, yet closed at +%s", spec, now, d)
				}
			}
			return
		}
		if !next.After(now) {
			t.Fatalf("next %s is not after now %s", next, now)
		}
		if !open && next.Sub(now) > week {
			t.Fatalf("closed at %s and next opens %s: more than a week", now, next)
		}
		mid := now.Add(next.Sub(now) / 2)
		if o, n := Open(spec, mid); o != open || !n.Equal(next) {
			t.Fatalf("at %s (between now %s and next %s): %v %s, want %v %s", mid, now, next, o, n, open, next)
		}
		if o, _ := Open(spec, next.Add(-time.Second)); o != open {
			t.Fatalf("a second before next %s the state changed already", next)
		}
		if o, _ := Open(spec, next); o == open {
			t.Fatalf("at next %s the state (%v) did not change", next, open)
		}
	})
}

// Next and Prev of any expression agree: nothing fires between a firing's
// predecessor and it.
func TestCronProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		zones := []string{"", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"}
		loc, _ := Location(rapid.SampledFrom(zones).Draw(t, "zone"))
		expr := strings.Join([]string{
			rapid.SampledFrom([]string{"0", "30", "*/15", "0,45", "5-10"}).Draw(t, "min"),
			rapid.SampledFrom([]string{"*", "2", "1-3", "8", "19", "*/6"}).Draw(t, "hour"),
			rapid.SampledFrom([]string{"*", "1", "15", "29-31"}).Draw(t, "dom"),
			rapid.SampledFrom([]string{"*", "3", "10", "MAR-NOV"}).Draw(t, "month"),
			rapid.SampledFrom([]string{"*", "SUN", "MON-FRI", "6"}).Draw(t, "dow"),
		}, " ")
		c, err := ParseCron(expr, loc)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(rapid.Int64Range(1767225600, 1798761600).Draw(t, "now"), 0)
		next, ok := c.Next(now)
		if !ok {
			t.Fatalf("%q never fires after %s", expr, now)
		}
		if !next.After(now) {
			t.Fatalf("%q: next %s not after %s", expr, next, now)
		}
		if p, ok := c.Prev(next.Add(-time.Second)); ok && p.After(now) {
			t.Fatalf("%q: fires at %s, between %s and next %s", expr, p, now, next)
		}
		if p, ok := c.Prev(now); ok {
			if n, _ := c.Next(p); n.After(now) && !n.Equal(next) || p.After(now) {
				t.Fatalf("%q: prev %s, next of it %s, next %s", expr, p, n, next)
			}
		}
	})
}

func TestDecide(t *testing.T) {
	loc := berlin(t)
	start, _ := ParseCron("0 19 * * *", loc) // hibernate at 19:00
	end, _ := ParseCron("0 7 * * *", loc)    // wake at 07:00
	ss := Schedules{{Start: start, End: end}}
	// 2026-10-24 19:00 CEST = 17:00Z; 2026-10-25 07:00 CET = 06:00Z.
	evening, morning := utc("2026-10-24T17:00:00Z"), utc("2026-10-25T06:00:00Z")
	tests := []struct {
		name                  string
		hibernated            bool
		seen, now             time.Time
		set, hibernate, overr bool
		wantSeen              time.Time
		nextAt                time.Time
		nextHibernates        bool
	}{
		{"first sight records without acting", false, time.Time{}, evening.Add(time.Hour), false, false, true, evening, morning, false},
		{"a passed transition is applied: hibernate", false, evening.Add(-11 * time.Hour), evening.Add(time.Minute), true, true, false, evening, morning, false},
		{"already hibernated: nothing to set", true, evening.Add(-11 * time.Hour), evening.Add(time.Minute), false, true, false, evening, morning, false},
		{"a manual wake after the applied transition holds", false, evening, evening.Add(2 * time.Hour), false, false, true, evening, morning, false},
		{"the next transition ends a manual wake: already awake", false, evening, morning, false, false, false, morning, utc("2026-10-25T18:00:00Z"), true},
		{"the next transition wakes a hibernated cluster", true, evening, morning, true, false, false, morning, utc("2026-10-25T18:00:00Z"), true},
		{"a manual hibernate in the day holds until the evening", true, morning, morning.Add(3 * time.Hour), false, false, true, morning, utc("2026-10-25T18:00:00Z"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := ss.Decide(tt.hibernated, tt.seen, tt.now)
			if d.Set != tt.set || (d.Set && d.Hibernate != tt.hibernate) || d.Override != tt.overr || !d.Seen.Equal(tt.wantSeen) {
				t.Errorf("Decide = %+v; want set %v hibernate %v override %v seen %s", d, tt.set, tt.hibernate, tt.overr, tt.wantSeen)
			}
			if !d.Next.At.Equal(tt.nextAt) || d.Next.Hibernate != tt.nextHibernates {
				t.Errorf("next = %s hibernate %v; want %s %v", d.Next.At.UTC(), d.Next.Hibernate, tt.nextAt.UTC(), tt.nextHibernates)
			}
		})
	}
}

func TestParseSchedulesErrors(t *testing.T) {
	_, errs := ParseSchedules(&capnv1.HibernationSpec{Schedules: []*capnv1.HibernationSchedule{
		{Start: "0 19 * * MON-FRI", End: "0 7 * *", Location: "Europe/Berlin"},
		{},
		{Start: "0 19 * * *", Location: "Nowhere/Land"},
	}})
	var got []string
	for _, e := range errs {
		got = append(got, e.Error())
	}
	want := []string{
		`schedules[0].end: "0 7 * *" has 4 fields: want 5 (minute hour day-of-month month day-of-week), e.g. "0 19 * * MON-FRI"`,
		`schedules[1]: needs start (when to hibernate), end (when to wake) or both`,
		`schedules[2].location: "Nowhere/Land" is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
