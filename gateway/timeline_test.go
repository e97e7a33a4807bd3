package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// publishFact stores a machine fact of cluster on CAPN_EVENTS, as the
// machine-manager does.
func (e *env) publishFact(pub *events.Publisher, cluster, machine, what, reason string) uint64 {
	e.t.Helper()
	ack, err := pub.Publish(context.Background(), events.EventSubject("machine", what, cluster, machine),
		events.TypeMachineEvent+"."+what, cluster+"."+machine+"."+what+"."+reason,
		&capnv1.MachineEvent{Cluster: cluster, Machine: machine, Phase: "Running", Reason: reason, Message: "machine " + machine + " " + what})
	if err != nil {
		e.t.Fatal(err)
	}
	return ack.Sequence
}

func (e *env) timeline(t *testing.T, query string) api.TimelineList {
	t.Helper()
	r := e.do(http.MethodGet, "/v1/clusters/demo/events"+query, tokRead, nil)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var l api.TimelineList
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

func reasons(items []api.TimelineEvent) string {
	var out []string
	for _, it := range items {
		out = append(out, it.Reason)
	}
	return strings.Join(out, ",")
}

func TestTimeline(t *testing.T) {
	e := newEnv(t)
	if l := e.timeline(t, ""); len(l.Items) != 0 {
		t.Fatalf("empty timeline: %+v", l)
	}
	pub := events.NewPublisher(e.js, "capn/machine-manager")
	e.publishFact(pub, "demo", "demo-cp-0", "provisioned", "r1")
	e.publishFact(pub, "other", "other-cp-0", "provisioned", "elsewhere")
	seq2 := e.publishFact(pub, "demo", "demo-md-0", "provisioned", "r2")
	e.publishFact(pub, "demo", "demo-md-0", "running", "r3")
	if _, err := pub.Publish(context.Background(), events.EventSubject("cluster", "ready", "demo", events.ClusterObject), events.TypeClusterEvent+".ready", "demo.ready",
		&capnv1.ClusterEvent{Cluster: "demo", Phase: "Ready", Reason: "r4"}); err != nil {
		t.Fatal(err)
	}

	l := e.timeline(t, "")
	if got := reasons(l.Items); got != "r1,r2,r3,r4" || l.Truncated {
		t.Fatalf("timeline %q (truncated %v)", got, l.Truncated)
	}
	first := l.Items[0]
	if first.Entity != "machine" || first.What != "provisioned" || first.Cluster != "demo" || first.Object != "demo-cp-0" ||
		first.Type != "dev.capn.machine.provisioned" || first.Source != "capn/machine-manager" || first.Phase != "Running" ||
		first.Message != "machine demo-cp-0 provisioned" || first.Time.IsZero() || first.Sequence == 0 ||
		!strings.Contains(string(first.Data), `"reason":"r1"`) {
		t.Errorf("first event %+v (data %s)", first, first.Data)
	}
	if last := l.Items[3]; last.Entity != "cluster" || last.Object != events.ClusterObject || last.Phase != "Ready" {
		t.Errorf("cluster event %+v", last)
	}
	// A fact without a reason field is named by its subject, CamelCase.
	bpub := events.NewPublisher(e.js, "capn/bootstrapper")
	if _, err := bpub.Publish(context.Background(), events.EventSubject("bootstrap", "ready", "demo", "demo-cp-0"), events.TypeBootstrapReady, "demo.cp-0.bootstrap-ready",
		&capnv1.BootstrapReady{Cluster: "demo", Machine: "demo-cp-0", Checksum: "sha256:x"}); err != nil {
		t.Fatal(err)
	}
	if l := e.timeline(t, "?limit=1"); len(l.Items) != 1 || l.Items[0].Reason != "BootstrapReady" || l.Items[0].What != "ready" {
		t.Errorf("bootstrap.ready: %+v, want reason BootstrapReady", l.Items)
	}
	if got := reasons(e.timeline(t, "?limit=3").Items); got != "r3,r4,BootstrapReady" {
		t.Errorf("limit 2: %q", got)
	}
	if l := e.timeline(t, "?limit=2"); !l.Truncated {
		t.Error("limit 2 of 5: not marked truncated")
	}
	if got := reasons(e.timeline(t, "?since="+strconv.FormatUint(seq2, 10)).Items); got != "r3,r4,BootstrapReady" {
		t.Errorf("since r2: %q", got)
	}
	e.do(http.MethodGet, "/v1/clusters/demo/events?limit=0", tokRead, nil).wantProblem(t, http.StatusBadRequest, "limit")
	e.do(http.MethodGet, "/v1/clusters/demo/events?since=x", tokRead, nil).wantProblem(t, http.StatusBadRequest, "since")
	e.do(http.MethodGet, "/v1/clusters/demo/events?follow=maybe", tokRead, nil).wantProblem(t, http.StatusBadRequest, "follow")
	e.do(http.MethodGet, "/v1/clusters/demo/events", tokIngest, nil).wantProblem(t, http.StatusForbidden)
}

// sseReader reads a stream's events for a test.
type sseReader struct {
	t    *testing.T
	resp *http.Response
	sc   *bufio.Scanner
	// comments counts the comment lines seen (heartbeats).
	comments int
}

type sseTestEvent struct{ id, event, data string }

func (e *env) openSSE(t *testing.T, path, token string, hdr ...string) *sseReader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != api.MediaEventStream {
		t.Fatalf("%s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &sseReader{t: t, resp: resp, sc: bufio.NewScanner(resp.Body)}
}

// next returns the next event, failing after 10s.
func (s *sseReader) next() sseTestEvent {
	s.t.Helper()
	got := make(chan sseTestEvent, 1)
	go func() {
		var ev sseTestEvent
		for s.sc.Scan() {
			line := s.sc.Text()
			switch {
			case line == "":
				if ev.data != "" {
					got <- ev
					return
				}
				ev = sseTestEvent{}
			case strings.HasPrefix(line, ":"):
				s.comments++
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data += line[6:]
			}
		}
		close(got)
	}()
	select {
	case ev, ok := <-got:
		if !ok {
			s.t.Fatalf("stream ended: %v", s.sc.Err())
		}
		return ev
	case <-time.After(10 * time.Second):
		s.t.Fatal("no event within 10s")
	}
	return sseTestEvent{}
}

// heartbeat reads until a comment line (a heartbeat), skipping anything
// else, and fails after 10s.
func (s *sseReader) heartbeat() {
	s.t.Helper()
	got := make(chan struct{}, 1)
	go func() {
		for s.sc.Scan() {
			if strings.HasPrefix(s.sc.Text(), ":") {
				s.comments++
				got <- struct{}{}
				return
			}
		}
		close(got)
	}()
	select {
	case _, ok := <-got:
		if !ok {
			s.t.Fatalf("stream ended: %v", s.sc.Err())
		}
	case <-time.After(10 * time.Second):
		s.t.Fatal("no heartbeat within 10s")
	}
}

func TestTimelineFollow(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Heartbeat = 50 * time.Millisecond })
	pub := events.NewPublisher(e.js, "capn/machine-manager")
	s1 := e.publishFact(pub, "demo", "demo-cp-0", "provisioned", "r1")

	s := e.openSSE(t, "/v1/clusters/demo/events?follow=true", tokRead)
	if ev := s.next(); ev.event != api.TimelineEventName || ev.id != strconv.FormatUint(s1, 10) || !strings.Contains(ev.data, `"reason":"r1"`) {
		t.Fatalf("backlog: %+v", ev)
	}
	if ev := s.next(); ev.event != api.TimelineSynced {
		t.Fatalf("want SYNCED, got %+v", ev)
	}
	e.publishFact(pub, "other", "x", "provisioned", "elsewhere")
	s2 := e.publishFact(pub, "demo", "demo-md-0", "running", "r2")
	if ev := s.next(); ev.id != strconv.FormatUint(s2, 10) || !strings.Contains(ev.data, `"reason":"r2"`) {
		t.Fatalf("live: %+v", ev)
	}
	s.heartbeat() // a quiet stream gets heartbeats, and goes on after them
	s3 := e.publishFact(pub, "demo", "demo-md-0", "deleted", "r3")
	if ev := s.next(); ev.id != strconv.FormatUint(s3, 10) {
		t.Fatalf("live: %+v", ev)
	}

	// Resuming after r2 gets r3 only, then SYNCED.
	r := e.openSSE(t, "/v1/clusters/demo/events?follow=true", tokRead, "Last-Event-ID", strconv.FormatUint(s2, 10))
	if ev := r.next(); !strings.Contains(ev.data, `"reason":"r3"`) {
		t.Fatalf("resume: %+v", ev)
	}
	if ev := r.next(); ev.event != api.TimelineSynced || ev.id != strconv.FormatUint(s3, 10) {
		t.Fatalf("resume: want SYNCED at %d, got %+v", s3, ev)
	}
}
