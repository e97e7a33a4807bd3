package events

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsNamesAndLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.count("c1", "ack")
	m.count("c1", "ack")
	m.count("c1", "dead_letter")
	calls := 0
	h := m.timed("c1")(func(context.Context, *Message) error { calls++; return nil })
	_ = h(context.Background(), &Message{})
	var nilM *Metrics
	nilM.count("c1", "ack") // a consumer without metrics counts nothing
	_ = nilM.timed("c1")(func(context.Context, *Message) error { calls++; return nil })(context.Background(), &Message{})
	if calls != 2 {
		t.Fatalf("handler called %d times, want 2", calls)
	}

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			labels := ""
			for _, l := range mt.GetLabel() {
				labels += l.GetName() + "=" + l.GetValue() + ","
			}
			v := mt.GetCounter().GetValue()
			if h := mt.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount())
			}
			got[f.GetName()+"{"+labels+"}"] = v
		}
	}
	want := map[string]float64{
		"capn_events_handled_total{consumer=c1,outcome=ack,}":         2,
		"capn_events_handled_total{consumer=c1,outcome=dead_letter,}": 1,
		"capn_events_handler_seconds{consumer=c1,}":                   1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("series %v, want exactly %v", got, want)
	}
}
