package gateway

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

func TestParseTokensClusters(t *testing.T) {
	in := "t1 ingest npd clusters=a,b\n" +
		"t2 ingest mon clusterSelector=env=prod,team\n" +
		"t3 ingest both clusters=c clusterSelector=env=dev\n"
	toks, err := ParseTokens(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	a, err := newAuthenticator(toks, false)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		token   int
		cluster string
		labels  labels.Set
		want    bool
	}{
		{0, "a", nil, true},
		{0, "b", nil, true},
		{0, "c", labels.Set{"env": "prod", "team": "x"}, false},
		{1, "c", labels.Set{"env": "prod", "team": "x"}, true},
		{1, "c", labels.Set{"env": "prod"}, false},
		{1, "gone", nil, false}, // a cluster that does not exist matches no selector
		{2, "c", nil, true},
		{2, "d", labels.Set{"env": "dev"}, true},
		{2, "e", labels.Set{"env": "prod"}, false},
	}
	for _, tt := range tests {
		r := a.tokens[tt.token].reach
		got := false
		for _, c := range r.clusters {
			got = got || c == tt.cluster
		}
		got = got || (r.selector != nil && tt.labels != nil && r.selector.Matches(tt.labels))
		if got != tt.want {
			t.Errorf("token %s, cluster %s %v: in reach %v, want %v", a.tokens[tt.token].name, tt.cluster, tt.labels, got, tt.want)
		}
	}

	bad := "t1 ingest n1 clusters=Bad_Name\n" +
		"t2 ingest n2 clusterSelector=a!!b\n" +
		"t3 ingest n3 region=eu\n" +
		"t4 ingest n4 clusters=a clusters=b\n" +
		"t5 ingest n5 clusters=\n"
	_, err = ParseTokens(strings.NewReader(bad))
	for _, want := range []string{
		`line 1: clusters: "Bad_Name" is not a cluster name`,
		`line 2: clusterSelector "a!!b"`,
		`line 3: option "region": unknown or repeated`,
		`line 4: option "clusters": unknown or repeated`,
		`line 5: option "clusters=": want clusters=`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
