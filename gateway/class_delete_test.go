package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/schemas/keys"
)

// A class is deleted only when no cluster uses it: while clusters do, 409
// naming the first ten and counting the rest, nothing written; a stale
// resourceVersion is a 409 and a dry run writes nothing; the delete takes
// the class and its revision records; the read token may not.
func TestDeleteClusterClass(t *testing.T) {
	e := newEnv(t)
	yaml := []string{"Content-Type", api.MediaYAML}
	if r := e.do(http.MethodPost, "/v1/clusterclasses", tokWrite, classYAML, yaml...); r.status != http.StatusCreated {
		t.Fatalf("class: %d %s", r.status, r.body)
	}
	v2 := strings.Replace(classYAML, "kubernetesVersion: v1.34.2", "kubernetesVersion: v1.34.3", 1)
	if r := e.do(http.MethodPost, "/v1/clusterclasses", tokWrite, v2, yaml...); r.class(t).GetStatus().GetRevision() != 2 {
		t.Fatalf("revision 2: %d %s", r.status, r.body)
	}
	// A second class, and a cluster of it: its records are not touched.
	other := strings.Replace(classYAML, "name: standard", "name: other", 1)
	if r := e.do(http.MethodPost, "/v1/clusterclasses", tokWrite, other, yaml...); r.status != http.StatusCreated {
		t.Fatalf("class other: %d %s", r.status, r.body)
	}
	e.apply(strings.NewReplacer("name: fleet-1", "name: o-1", "class: standard", "class: other").Replace(classClusterYAML))
	var users []string
	for i := 1; i <= 12; i++ {
		name := fmt.Sprintf("fleet-%02d", i)
		users = append(users, name)
		e.apply(strings.Replace(classClusterYAML, "name: fleet-1", "name: "+name, 1))
	}
	e.apply(manifestNamed("plain", "{env: dev}")) // no class

	if r := e.do(http.MethodDelete, "/v1/clusterclasses/standard", tokRead, nil); r.status != http.StatusForbidden {
		t.Fatalf("read token deleted a class: %d", r.status)
	}
	seq := e.lastSeq(e.desired)
	p := e.do(http.MethodDelete, "/v1/clusterclasses/standard", tokWrite, nil).wantProblem(t, http.StatusConflict)
	for _, want := range append(users[:10:10], "12 clusters", "and 2 more") {
		if !strings.Contains(p.Detail, want) {
			t.Errorf("refusal %q lacks %q", p.Detail, want)
		}
	}
	for _, not := range []string{"fleet-11", "fleet-12", "o-1", "plain"} {
		if strings.Contains(p.Detail, not) {
			t.Errorf("refusal %q names %s", p.Detail, not)
		}
	}
	if e.lastSeq(e.desired) != seq {
		t.Fatal("a refused delete wrote")
	}
	// The clusters go (as the planner removes a cluster it has finished
	// deleting), all but one.
	for _, name := range users[1:] {
		if err := e.desired.Delete(context.Background(), keys.Cluster(name)); err != nil {
			t.Fatal(err)
		}
	}
	seq = e.lastSeq(e.desired)
	p = e.do(http.MethodDelete, "/v1/clusterclasses/standard", tokWrite, nil).wantProblem(t, http.StatusConflict)
	if !strings.Contains(p.Detail, "used by 1 cluster: fleet-01:") {
		t.Errorf("refusal %q, want it to name fleet-01 alone", p.Detail)
	}
	if e.lastSeq(e.desired) != seq {
		t.Fatal("a refused delete wrote")
	}
	if err := e.desired.Delete(context.Background(), keys.Cluster("fleet-01")); err != nil {
		t.Fatal(err)
	}

	cur := e.do(http.MethodGet, "/v1/clusterclasses/standard", tokRead, nil).class(t)
	rv := cur.GetMetadata().GetResourceVersion()
	seq = e.lastSeq(e.desired)
	if r := e.do(http.MethodDelete, "/v1/clusterclasses/standard?resourceVersion=1", tokWrite, nil); r.status != http.StatusConflict {
		t.Fatalf("stale resourceVersion: %d %s", r.status, r.body)
	}
	e.do(http.MethodDelete, "/v1/clusterclasses/standard?dryRun=Some", tokWrite, nil).wantProblem(t, http.StatusBadRequest)
	if r := e.do(http.MethodDelete, "/v1/clusterclasses/standard?dryRun=All", tokWrite, nil); r.status != http.StatusOK || r.class(t).GetStatus().GetRevision() != 2 {
		t.Fatalf("dry run: %d %s", r.status, r.body)
	}
	if e.lastSeq(e.desired) != seq {
		t.Fatal("a dry run or a refused delete wrote")
	}

	r := e.do(http.MethodDelete, "/v1/clusterclasses/standard?resourceVersion="+rv, tokWrite, nil)
	if r.status != http.StatusOK || r.class(t).GetMetadata().GetName() != "standard" {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	var left []string
	for _, k := range e.keys(e.desired) {
		if strings.HasPrefix(k, "clusterclass.") || strings.HasPrefix(k, "classrev.") {
			left = append(left, k)
		}
	}
	if want := []string{"classrev.other.1", "clusterclass.other"}; !slices.Equal(left, want) {
		t.Errorf("class keys after the delete %v, want %v", left, want)
	}
	if r := e.do(http.MethodGet, "/v1/clusterclasses/standard", tokRead, nil); r.status != http.StatusNotFound {
		t.Errorf("get after delete: %d", r.status)
	}
	if r := e.do(http.MethodDelete, "/v1/clusterclasses/standard", tokWrite, nil); r.status != http.StatusNotFound {
		t.Errorf("second delete: %d", r.status)
	}
	// Applied again, the class starts over at revision 1.
	if r := e.do(http.MethodPost, "/v1/clusterclasses", tokWrite, classYAML, yaml...); r.status != http.StatusCreated || r.class(t).GetStatus().GetRevision() != 1 {
		t.Fatalf("class again: %d %s", r.status, r.body)
	}
}
