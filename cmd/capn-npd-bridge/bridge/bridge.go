// Package bridge is capn-npd-bridge: it runs beside node-problem-detector
// (NPD) on a node, scrapes NPD's Prometheus endpoint — NPD has no push
// exporter — and publishes the node's health to capn as CloudEvents:
//
//	NPD /metrics ──scrape every Interval──► Advance (pure) ──► Sink ──► capn.health.<c>.<m>.conditions
//	  problem_gauge{type,reason}   → NodeConditions (level: on change, and every ResyncEvery)
//	  problem_counter{reason} grew → ProblemEvent   (edge: once per increase)
//
// The sink is an interface: NATS directly today (NATSSink), the gateway's
// HTTP ingest later.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/daemon"
)

// Health subject kinds the bridge publishes on.
const (
	KindConditions = keys.HealthConditions
	KindProblem    = keys.HealthProblem
)

// Config configures a bridge. Zero fields take the defaults.
type Config struct {
	// URL of NPD's metrics (default http://127.0.0.1:20257/metrics: NPD's
	// --prometheus-address and --prometheus-port defaults).
	URL string
	// Cluster and Machine name the capn machine this node is (required).
	Cluster, Machine string
	// Source is the reports' source (default node-problem-detector).
	Source string
	// Interval between scrapes (default 10s).
	Interval time.Duration
	// ResyncEvery re-sends the conditions although nothing changed
	// (default 5m, NPD's own k8s-exporter heartbeat period), so a lost
	// report heals.
	ResyncEvery time.Duration
	// Timeout of one scrape or send (default 5s).
	Timeout time.Duration
	Now     func() time.Time
}

func (c Config) withDefaults() Config {
	if c.URL == "" {
		c.URL = "http://127.0.0.1:20257/metrics"
	}
	if c.Source == "" {
		c.Source = "node-problem-detector"
	}
	if c.Interval <= 0 {
		c.Interval = 10 * time.Second
	}
	if c.ResyncEvery <= 0 {
		c.ResyncEvery = 5 * time.Minute
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports every problem at once, as daemon.FieldErrors.
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct{ flag, v string }{{"cluster", c.Cluster}, {"machine", c.Machine}} {
		if f.v == "" {
			errs = append(errs, &daemon.FieldError{Flag: f.flag, Env: envOf(f.flag), Problem: "required: the capn " + f.flag + " this node belongs to"})
		} else if !validName(f.v) {
			errs = append(errs, &daemon.FieldError{Flag: f.flag, Env: envOf(f.flag), Value: f.v, Problem: "letters, digits, '-' and '_' only"})
		}
	}
	if c.URL != "" {
		if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, &daemon.FieldError{Flag: "npd-url", Env: envOf("npd-url"), Value: c.URL, Problem: "must be an http(s) URL such as http://127.0.0.1:20257/metrics"})
		}
	}
	return errors.Join(errs...)
}

// Bridge scrapes NPD and sends what changed. Run it once.
type Bridge struct {
	cfg    Config
	sink   Sink
	client *http.Client
	state  State
	// lastSync is when the conditions were last sent.
	lastSync time.Time
}

// New returns a bridge sending to sink.
func New(cfg Config, sink Sink) *Bridge {
	cfg = cfg.withDefaults()
	return &Bridge{cfg: cfg, sink: sink, client: &http.Client{Timeout: cfg.Timeout}}
}

// Run scrapes every Interval until ctx ends, then returns nil. A failed
// scrape or send is logged (zerolog.Ctx) and tried again at the next tick.
func (b *Bridge) Run(ctx context.Context) error {
	t := time.NewTicker(b.cfg.Interval)
	defer t.Stop()
	for {
		if err := b.Once(ctx); err != nil && ctx.Err() == nil {
			zerolog.Ctx(ctx).Warn().Err(err).Msg("npd bridge: will retry at the next scrape")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Once scrapes NPD once and sends the reports the sample calls for. The
// state advances only past what was delivered: an undelivered problem or
// condition change is sent again next time, with the same id.
func (b *Bridge) Once(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	s, err := Scrape(sctx, b.client, b.cfg.URL)
	if err != nil {
		return err
	}
	now := b.cfg.Now()
	step := Advance(b.state, s, now)
	var errs []error
	for reason, n := range step.Problems {
		if err := b.send(ctx, b.problem(reason, n, step.Next.Counters[reason], now)); err != nil {
			errs = append(errs, err)
			step.Next.Counters[reason] = b.state.Counters[reason] // not delivered: report it again
		}
	}
	if step.ConditionsChanged || now.Sub(b.lastSync) >= b.cfg.ResyncEvery {
		nc := step.Next.NodeConditions(b.cfg.Cluster, b.cfg.Machine, b.cfg.Source, now)
		r := Report{Subject: events.HealthSubject(b.cfg.Cluster, b.cfg.Machine, KindConditions), Type: events.TypeNodeConditions,
			ID: fmt.Sprintf("conditions.%s.%s.%d", b.cfg.Cluster, b.cfg.Machine, now.UnixMilli()), Machine: b.cfg.Machine, Time: now, Data: nc}
		if err := b.send(ctx, r); err != nil {
			errs = append(errs, err)
			step.Next.Conditions = b.state.Conditions // not delivered: the change is still to send
		} else {
			b.lastSync = now
			if step.ConditionsChanged {
				zerolog.Ctx(ctx).Info().Int("conditions", len(nc.GetConditions())).Msg("npd bridge: node conditions sent")
			}
		}
	}
	b.state = step.Next
	return errors.Join(errs...)
}

func (b *Bridge) problem(reason string, n, total float64, now time.Time) Report {
	msg := fmt.Sprintf("node-problem-detector counted %s new %s problem(s)", strconv.FormatFloat(n, 'f', -1, 64), reason)
	p := &capnv1.ProblemEvent{Cluster: b.cfg.Cluster, Machine: b.cfg.Machine, Source: b.cfg.Source, Severity: "warn",
		Reason: reason, Message: msg, Time: timestamppb.New(now)}
	return Report{Subject: events.HealthSubject(b.cfg.Cluster, b.cfg.Machine, KindProblem), Type: events.TypeProblemEvent,
		ID:      fmt.Sprintf("problem.%s.%s.%s.%s", b.cfg.Cluster, b.cfg.Machine, reason, strconv.FormatFloat(total, 'f', -1, 64)),
		Machine: b.cfg.Machine, Time: now, Data: p}
}

func (b *Bridge) send(ctx context.Context, r Report) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	if err := b.sink.Send(ctx, r); err != nil {
		return fmt.Errorf("send %s: %w", r.ID, err)
	}
	return nil
}
