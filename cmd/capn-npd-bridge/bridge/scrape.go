package bridge

import (
	"context"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// NPD's metric names (pkg/problemmetrics): problem_gauge{type,reason} is 1
// while a permanent problem (a node condition) of that type and reason is
// present; problem_counter{reason} counts problems (events) by reason.
const (
	metricGauge   = "problem_gauge"
	metricCounter = "problem_counter"
)

// Sample is one scrape of NPD's metrics.
type Sample struct {
	// Gauges: by condition type, by reason, the gauge's value.
	Gauges map[string]map[string]float64
	// Counters: by reason, the counter's value.
	Counters map[string]float64
}

// Parse reads NPD's metrics in the Prometheus text format.
func Parse(r io.Reader) (Sample, error) {
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Sample{}, fmt.Errorf("parse metrics: %w", err)
	}
	s := Sample{Gauges: map[string]map[string]float64{}, Counters: map[string]float64{}}
	for _, m := range fams[metricGauge].GetMetric() {
		typ, reason := label(m, "type"), label(m, "reason")
		if typ == "" {
			continue
		}
		if s.Gauges[typ] == nil {
			s.Gauges[typ] = map[string]float64{}
		}
		s.Gauges[typ][reason] = value(m)
	}
	for _, m := range fams[metricCounter].GetMetric() {
		if reason := label(m, "reason"); reason != "" {
			s.Counters[reason] = value(m)
		}
	}
	return s, nil
}

// Scrape fetches and parses url (NPD's --prometheus-address and port,
// path /metrics).
func Scrape(ctx context.Context, c *http.Client, url string) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Sample{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := c.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	s, err := Parse(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return Sample{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	return s, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
