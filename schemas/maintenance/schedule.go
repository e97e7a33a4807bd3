package maintenance

import (
	"fmt"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Transition is one scheduled change of spec.hibernated.
type Transition struct {
	At        time.Time
	Hibernate bool // true: hibernate; false: wake
}

// IsZero says there is no transition.
func (t Transition) IsZero() bool { return t.At.IsZero() }

// Schedule is a parsed HibernationSchedule.
type Schedule struct {
	Start, End *Cron // either may be nil
}

// Schedules are a cluster's parsed hibernation schedules.
type Schedules []Schedule

// ParseSchedules parses spec's schedules; errors name the field below
// hibernation ("schedules[0].start").
func ParseSchedules(spec *capnv1.HibernationSpec) (Schedules, []*FieldError) {
	var out Schedules
	var errs []*FieldError
	for i, s := range spec.GetSchedules() {
		path := fmt.Sprintf("schedules[%d]", i)
		loc, err := Location(s.GetLocation())
		if err != nil {
			errs = append(errs, &FieldError{path + ".location", err.Error()})
			continue
		}
		if s.GetStart() == "" && s.GetEnd() == "" {
			errs = append(errs, &FieldError{path, "needs start (when to hibernate), end (when to wake) or both"})
			continue
		}
		var sc Schedule
		if s.GetStart() != "" {
			if sc.Start, err = ParseCron(s.GetStart(), loc); err != nil {
				errs = append(errs, &FieldError{path + ".start", err.Error()})
			}
		}
		if s.GetEnd() != "" {
			if sc.End, err = ParseCron(s.GetEnd(), loc); err != nil {
				errs = append(errs, &FieldError{path + ".end", err.Error()})
			}
		}
		out = append(out, sc)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// later picks between two transitions at the same instant: a wake wins,
// so that schedules that disagree keep the cluster running.
func pick(a, b Transition, after bool) Transition {
	switch {
	case a.IsZero():
		return b
	case b.IsZero():
		return a
	case a.At.Equal(b.At):
		if !a.Hibernate {
			return a
		}
		return b
	case a.At.After(b.At) == after:
		return a
	}
	return b
}

// Last is the latest scheduled transition at or before now (zero: none
// within five years).
func (ss Schedules) Last(now time.Time) Transition {
	var best Transition
	for _, s := range ss {
		for _, c := range []struct {
			cron      *Cron
			hibernate bool
		}{{s.Start, true}, {s.End, false}} {
			if c.cron == nil {
				continue
			}
			if t, ok := c.cron.Prev(now); ok {
				best = pick(best, Transition{t, c.hibernate}, true)
			}
		}
	}
	return best
}

// Next is the first scheduled transition strictly after now (zero: none
// within five years).
func (ss Schedules) Next(now time.Time) Transition {
	var best Transition
	for _, s := range ss {
		for _, c := range []struct {
			cron      *Cron
			hibernate bool
		}{{s.Start, true}, {s.End, false}} {
			if c.cron == nil {
				continue
			}
			if t, ok := c.cron.Next(now); ok {
				best = pick(best, Transition{t, c.hibernate}, false)
			}
		}
	}
	return best
}

// Decision is what the hibernation schedules want of a cluster at now.
type Decision struct {
	// Set says spec.hibernated must become Hibernate: a scheduled
	// transition passed that has not been applied yet.
	Set       bool
	Hibernate bool
	// Seen is the transition to record as applied (zero: none yet).
	Seen time.Time
	// Override: the user's spec.hibernated differs from what the last
	// applied transition set, and holds until Next.
	Override bool
	Next     Transition
}

// Decide is the hibernation rule, pure: given the schedules, the cluster's
// spec.hibernated, the last transition already applied (seen; zero when
// the service never recorded one) and now. A transition is applied once:
// the first time the service sees a schedule it records the last
// transition as seen without acting (the schedule acts from its next
// transition, as a cron job would), and a user's change after an applied
// transition holds (an override) until the next one.
func (ss Schedules) Decide(hibernated bool, seen, now time.Time) Decision {
	last := ss.Last(now)
	d := Decision{Next: ss.Next(now), Seen: seen}
	switch {
	case last.IsZero():
	case seen.IsZero():
		d.Seen = last.At
		d.Override = hibernated != last.Hibernate
	case last.At.After(seen):
		d.Seen = last.At
		d.Set, d.Hibernate = hibernated != last.Hibernate, last.Hibernate
	default:
		d.Override = hibernated != last.Hibernate
	}
	return d
}
