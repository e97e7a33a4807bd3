package bridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// npdMetrics is what NPD v1.36.0 serves with the filelog kernel monitor
// (checked against the real binary).
func npdMetrics(deadlock, taskHung, dockerHung int) string {
	return fmt.Sprintf(`# HELP problem_counter Number of times a specific type of problem have occurred.
# TYPE problem_counter counter
problem_counter{reason="DockerHung"} %d
problem_counter{reason="KernelOops"} 0
problem_counter{reason="OOMKilling"} 0
problem_counter{reason="TaskHung"} %d
# HELP problem_gauge Whether a specific type of problem is affecting the node or not.
# TYPE problem_gauge gauge
problem_gauge{reason="DockerHung",type="KernelDeadlock"} %d
`, dockerHung, taskHung, deadlock)
}

func TestParseAndAdvance(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	s0, err := Parse(strings.NewReader(npdMetrics(0, 0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	st := Advance(State{}, s0, t0)
	if !st.ConditionsChanged || len(st.Problems) != 0 || st.Next.Conditions["KernelDeadlock"].Status != "False" {
		t.Fatalf("first sample: %+v", st)
	}
	s1, _ := Parse(strings.NewReader(npdMetrics(1, 1, 1)))
	st1 := Advance(st.Next, s1, t0.Add(time.Minute))
	c := st1.Next.Conditions["KernelDeadlock"]
	if !st1.ConditionsChanged || c.Status != "True" || c.Reason != "DockerHung" || !c.Since.Equal(t0.Add(time.Minute)) {
		t.Fatalf("deadlock: %+v", st1)
	}
	if st1.Problems["TaskHung"] != 1 || st1.Problems["DockerHung"] != 1 || len(st1.Problems) != 2 {
		t.Fatalf("problems: %v", st1.Problems)
	}
	st2 := Advance(st1.Next, s1, t0.Add(2*time.Minute))
	if st2.ConditionsChanged || len(st2.Problems) != 0 || !st2.Next.Conditions["KernelDeadlock"].Since.Equal(t0.Add(time.Minute)) {
		t.Fatalf("steady: %+v", st2)
	}
	nc := st2.Next.NodeConditions("c1", "m1", "npd", t0.Add(2*time.Minute))
	if len(nc.GetConditions()) != 1 || nc.GetConditions()[0].GetLastTransitionTime().AsTime() != t0.Add(time.Minute) {
		t.Fatalf("report: %v", nc)
	}
	restarted, _ := Parse(strings.NewReader(npdMetrics(0, 0, 0)))
	if st3 := Advance(st2.Next, restarted, t0.Add(3*time.Minute)); len(st3.Problems) != 0 || st3.Next.Conditions["KernelDeadlock"].Status != "False" {
		t.Fatalf("NPD restarted: counters reset are a baseline, condition clears: %+v", st3)
	}
}

type fakeSink struct {
	mu   sync.Mutex
	sent []Report
	fail bool
}

func (f *fakeSink) Send(_ context.Context, r Report) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return errors.New("down")
	}
	f.sent = append(f.sent, r)
	return nil
}

func TestOnce(t *testing.T) {
	var mu sync.Mutex
	body := npdMetrics(0, 0, 0)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	sink := &fakeSink{}
	b := New(Config{URL: srv.URL, Cluster: "c1", Machine: "m1", Now: func() time.Time { return now }}, sink)
	ctx := context.Background()
	if err := b.Once(ctx); err != nil || len(sink.sent) != 1 || sink.sent[0].Subject != "capn.health.c1.m1.conditions" {
		t.Fatalf("first scrape sends the conditions: %v %+v", err, sink.sent)
	}
	now = now.Add(10 * time.Second)
	_ = b.Once(ctx)
	if len(sink.sent) != 1 {
		t.Fatal("nothing changed: nothing sent")
	}
	mu.Lock()
	body = npdMetrics(1, 1, 1)
	mu.Unlock()
	sink.fail = true
	now = now.Add(10 * time.Second)
	if err := b.Once(ctx); err == nil {
		t.Fatal("a failed send is an error")
	}
	sink.fail = false
	now = now.Add(10 * time.Second)
	if err := b.Once(ctx); err != nil {
		t.Fatal(err)
	}
	var conds *capnv1.NodeConditions
	problems := 0
	for _, r := range sink.sent[1:] {
		switch d := r.Data.(type) {
		case *capnv1.NodeConditions:
			conds = d
		case *capnv1.ProblemEvent:
			problems++
		}
	}
	if conds == nil || conds.GetConditions()[0].GetStatus() != "True" || problems != 2 {
		t.Fatalf("undelivered reports are sent again: %+v", sink.sent)
	}
	if err := (Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "--cluster") || !strings.Contains(err.Error(), "--machine") {
		t.Fatalf("validate: %v", err)
	}
}
