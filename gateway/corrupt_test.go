package gateway

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
)

// Lists that leave corrupt records out count them, and say so in at most
// maxWarnings+1 Warning headers. (tests/security performs the attack.)
func TestSkippedCorruptRecords(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{metrics: m}
	var bad []*store.CorruptError
	for i := range maxWarnings + 3 {
		bad = append(bad, &store.CorruptError{Key: fmt.Sprintf("cluster.c%02d", i), Revision: uint64(i + 1), Err: errors.New(`junk "here"`)})
	}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/v1/clusters", nil)
	r = r.WithContext(zerolog.Nop().WithContext(r.Context()))
	s.skipped(w, r, api.KindCluster, bad)
	if got := counter(t, reg, "capn_gateway_corrupt_records_total"); got != float64(len(bad)) {
		t.Errorf("capn_gateway_corrupt_records_total{kind=Cluster} %v, want %d", got, len(bad))
	}
	h := w.Header().Values("Warning")
	if len(h) != maxWarnings+1 {
		t.Fatalf("%d Warning headers, want %d", len(h), maxWarnings+1)
	}
	if want := `299 - "cluster c00 left out: stored record is corrupt (key cluster.c00, revision 1); DELETE /v1/clusters/c00 (capn delete cluster c00) removes it"`; h[0] != want {
		t.Errorf("first warning %s, want %s", h[0], want)
	}
	if !strings.Contains(h[maxWarnings], "3 more corrupt Cluster records left out") {
		t.Errorf("last warning %s", h[maxWarnings])
	}
}

// The client hands each Warning header's text to WithWarnings (capn
// prints them on stderr, as kubectl does).
func TestClientWarnings(t *testing.T) {
	e := newEnv(t)
	if _, err := e.desired.Put(t.Context(), "cluster.garbage", []byte("\xff\xff")); err != nil {
		t.Fatal(err)
	}
	var got []string
	c, err := client.New(e.url, client.WithToken(tokRead), client.WithWarnings(func(w string) { got = append(got, w) }))
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.List(t.Context(), client.ListOptions{})
	if err != nil || len(list) != 0 {
		t.Fatalf("list: %d clusters, %v", len(list), err)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "cluster garbage left out: stored record is corrupt (key cluster.garbage, revision ") {
		t.Errorf("warnings %q", got)
	}

	if _, err := c.Get(t.Context(), "garbage"); !client.IsCorrupt(err) {
		t.Errorf("GET of the corrupt cluster: %v, want client.IsCorrupt", err)
	}

	// A dry-run DELETE of it answers as the DELETE would and writes nothing;
	// the DELETE replaces it with a cluster being deleted.
	if r := e.do("DELETE", "/v1/clusters/garbage?dryRun=All", tokAdmin, nil); r.status != 202 {
		t.Fatalf("dry-run delete: %d %s", r.status, r.body)
	}
	if _, _, err := e.clusters.Get(t.Context(), "cluster.garbage"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("after a dry-run delete: %v, want the record as it was", err)
	}
	if r := e.do("DELETE", "/v1/clusters/garbage", tokAdmin, nil); r.status != 202 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	c2, _, err := e.clusters.Get(t.Context(), "cluster.garbage")
	if err != nil || c2.GetMetadata().GetDeletionTimestamp() == nil || c2.GetMetadata().GetAnnotations()[AnnotationCorruptRecord] == "" {
		t.Fatalf("after delete: %v, %v; want a cluster being deleted, annotated", c2, err)
	}
}

// counter is the value of a counter that has one series.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no single series of %s", name)
	return 0
}
