package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/services/daemon"
)

const eventsHelp = `
Prints a cluster's timeline, oldest first: what capn did to the cluster and
each machine, and why. With --follow it keeps printing new events until
Ctrl-C. -o json prints the gateway's JSON ({"items": [...]}; with
--follow, one event object per line).

Examples:
  capn events demo
  capn events demo --follow
  capn events demo --limit 20 -o json
`

func cmdEvents(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn events NAME [--follow] [--limit N] [-o json]", eventsHelp)
	var a apiFlags
	a.bind(fs)
	var follow bool
	var limit int
	var output string
	fs.BoolVar(&follow, "follow", false, "keep printing new events until Ctrl-C")
	fs.BoolVar(&follow, "f", false, "same as --follow")
	fs.IntVar(&limit, "limit", 0, "print only the latest `N` stored events (default: the gateway's, 1000)")
	fs.StringVar(&output, "o", "", "output `format`: json (default: a table)")
	fs.StringVar(&output, "output", "", "`format`: same as -o")
	const name = "capn events"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	cluster, err := oneCluster(pos, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if output != "" && output != outJSON {
		return reportError(e.stderr, name, nil, usagef("-o %q: only json", output))
	}
	if limit < 0 || limit > 10000 {
		return reportError(e.stderr, name, nil, usagef("--limit %d: must be 1..10000", limit))
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	p := &eventPrinter{w: e.stdout, json: output == outJSON, loc: time.Local}
	opts := client.EventsOptions{Limit: limit}
	if !follow {
		evs, err := s.c.Events(ctx, cluster, opts)
		if err != nil {
			return s.fail(err)
		}
		if p.json {
			b, err := encodeJSON(api.TimelineList{Items: evs})
			if err == nil {
				_, err = e.stdout.Write(b)
			}
			if err != nil {
				return s.fail(err)
			}
			return daemon.ExitOK
		}
		if len(evs) == 0 {
			fmt.Fprintf(e.stderr, "No events for cluster %s.\n", cluster)
			return daemon.ExitOK
		}
		if err := p.batch(evs); err != nil {
			return s.fail(err)
		}
		return daemon.ExitOK
	}
	var stored []api.TimelineEvent
	synced := false
	err = s.c.FollowEvents(ctx, cluster, opts, func(ev api.TimelineEvent) error {
		if !synced {
			stored = append(stored, ev)
			return nil
		}
		return p.one(ev)
	}, func() error {
		if synced {
			return nil
		}
		synced = true
		return p.batch(stored)
	})
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return daemon.ExitOK // Ctrl-C ends --follow
	}
	if err != nil {
		return s.fail(err)
	}
	return daemon.ExitOK
}

// eventPrinter prints timeline events as a table (columns sized by the
// first batch) or as JSON.
type eventPrinter struct {
	w    io.Writer
	json bool
	loc  *time.Location
	tbl  *table
}

var eventHeader = []string{"TIME", "OBJECT", "REASON", "MESSAGE"}

func (p *eventPrinter) row(ev api.TimelineEvent) []string {
	obj := "cluster/" + ev.Cluster
	if ev.Object != "" && ev.Object != "_" {
		obj = ev.Entity + "/" + ev.Object
	}
	reason := ev.Reason
	if reason == "" {
		reason = ev.What
	}
	return []string{ev.Time.In(p.loc).Format("15:04:05"), obj, reason, strings.ReplaceAll(ev.Message, "\n", " ")}
}

func (p *eventPrinter) batch(evs []api.TimelineEvent) error {
	if p.json {
		for _, ev := range evs {
			if err := p.one(ev); err != nil {
				return err
			}
		}
		return nil
	}
	rows := [][]string{eventHeader}
	for _, ev := range evs {
		rows = append(rows, p.row(ev))
	}
	p.tbl = newTable(rows...)
	for _, r := range rows {
		if _, err := io.WriteString(p.w, p.tbl.line(r)); err != nil {
			return err
		}
	}
	return nil
}

func (p *eventPrinter) one(ev api.TimelineEvent) error {
	if p.json {
		b, err := encodeJSONLine(ev)
		if err != nil {
			return err
		}
		_, err = p.w.Write(b)
		return err
	}
	if p.tbl == nil {
		p.tbl = newTable(eventHeader)
	}
	_, err := io.WriteString(p.w, p.tbl.line(p.row(ev)))
	return err
}
