package security

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/services/cluster-planner"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// junk is what an attacker (or a bug) with write access to the desired
// bucket puts under a key: not a protobuf message.
var junk = []byte("\xff\xff this is not a cluster")

// Finding 8: one junk value at desired cluster.garbage made GET
// /v1/clusters a 500 for every client, and DELETE of it a 500 too.
func TestCorruptClusterRecord(t *testing.T) {
	sys := newSystem(t, harness.Options{})
	sys.StartAll(clusterplanner.Name, harness.Sim, harness.Gateway)
	ctx := context.Background()
	var warnings []string
	c, err := client.New(sys.GatewayURL(), client.WithToken(sys.Token), client.WithWarnings(func(w string) { warnings = append(warnings, w) }))
	if err != nil {
		t.Fatal(err)
	}
	mm := machineManager{t: t, sys: sys}

	// garbage was a cluster with machines when its record was overwritten.
	if _, _, err := c.Apply(ctx, []byte(clusterYAML("garbage", 1))); err != nil {
		t.Fatal(err)
	}
	mm.runControlPlane("garbage", time.Minute)
	natstest.WaitFor(t, time.Minute, "garbage's worker", func() bool { return len(mm.machines("garbage")) == 2 })
	if _, err := sys.Desired.Put(ctx, "cluster.garbage", junk); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Apply(ctx, []byte(clusterYAML("good", 1))); err != nil {
		t.Fatal(err)
	}

	// Everyone can still list.
	list, err := c.List(ctx, client.ListOptions{})
	if err != nil {
		t.Fatalf("GET /v1/clusters with a corrupt record: %v", err)
	}
	var names []string
	for _, cl := range list {
		names = append(names, cl.GetMetadata().GetName())
	}
	if !slices.Equal(names, []string{"good"}) {
		t.Errorf("listed %v, want [good]", names)
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "cluster garbage left out: stored record is corrupt (key cluster.garbage, revision ") ||
		!strings.HasSuffix(warnings[0], "DELETE /v1/clusters/garbage (capn delete cluster garbage) removes it") {
		t.Errorf("warnings %q, want one naming cluster garbage and how to remove it", warnings)
	}

	// GET of the one record says what is wrong with it.
	_, err = c.Get(ctx, "garbage")
	var e *client.Error
	if !errors.As(err, &e) || e.StatusCode != http.StatusInternalServerError || e.Problem.Type != api.ProblemCorruptRecord ||
		!strings.HasPrefix(e.Problem.Detail, "stored record is corrupt: cluster.garbage at revision ") {
		t.Errorf("GET of the corrupt cluster: %v, want a 500 corrupt-record problem", err)
	}

	// The planner neither crash-loops nor tears down garbage's machines on
	// a guess; good is planned meanwhile.
	mm.runControlPlane("good", time.Minute)
	natstest.WaitFor(t, time.Minute, "good's worker", func() bool { return len(mm.machines("good")) == 2 })
	for _, m := range mm.machines("garbage") {
		if m.GetMetadata().GetDeletionTimestamp() != nil {
			t.Fatalf("machine %s is being deleted while its cluster's record is only unreadable", m.GetMetadata().GetName())
		}
	}

	// DELETE removes it, machines first, as any deleted cluster.
	if _, err := c.Delete(ctx, "garbage"); err != nil {
		t.Fatalf("DELETE of the corrupt cluster: %v", err)
	}
	deleted := map[string]bool{}
	natstest.WaitFor(t, time.Minute, "garbage and its machines gone", func() bool {
		ms := mm.machines("garbage")
		for _, m := range ms {
			if n := m.GetMetadata().GetName(); m.GetMetadata().GetDeletionTimestamp() != nil && !deleted[n] {
				mm.set("garbage", n, "Deleted")
				deleted[n] = true
			}
		}
		_, err := c.Get(ctx, "garbage")
		return len(ms) == 0 && client.IsNotFound(err)
	})
	if len(deleted) != 2 {
		t.Errorf("%d of garbage's 2 machines were deleted", len(deleted))
	}
	if keys := harness.Keys(t, sys.Observed, "infra.sim.garbage."); len(keys) != 0 {
		t.Errorf("garbage's infrastructure is left: %v", keys)
	}
}

// Finding 8, for machines: a junk machine record broke GET .../machines
// and stopped its cluster's plans for good (every plan failed on it).
func TestCorruptMachineRecord(t *testing.T) {
	sys := newSystem(t, harness.Options{})
	sys.StartAll(clusterplanner.Name, harness.Sim, harness.Gateway)
	ctx := context.Background()
	c := sys.Client()
	mm := machineManager{t: t, sys: sys}
	if _, _, err := c.Apply(ctx, []byte(clusterYAML("good", 1))); err != nil {
		t.Fatal(err)
	}
	mm.runControlPlane("good", time.Minute)
	natstest.WaitFor(t, time.Minute, "good's worker", func() bool { return len(mm.machines("good")) == 2 })
	if _, err := sys.Desired.Put(ctx, "machine.good.junk", junk); err != nil {
		t.Fatal(err)
	}
	var worker string
	for _, m := range mm.machines("good") {
		if m.GetSpec().GetPool() == "md-0" {
			worker = m.GetMetadata().GetName()
		}
	}
	if _, err := sys.Observed.Put(ctx, "machine.good."+worker, junk); err != nil {
		t.Fatal(err)
	}

	req, err := http.NewRequest(http.MethodGet, sys.GatewayURL()+"/v1/clusters/good/machines", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+sys.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var l api.List
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET .../machines with a corrupt record: %d, %v", resp.StatusCode, err)
	}
	if len(l.Items) != 2 { // the two machines, the worker without its status
		t.Errorf("listed %d machines, want 2", len(l.Items))
	}
	w := resp.Header.Values("Warning")
	if len(w) != 2 || !strings.Contains(w[0], "machine good/junk left out: stored record is corrupt") ||
		!strings.Contains(w[1], "machine good/"+worker+" listed without its status: stored record is corrupt") {
		t.Errorf("Warning headers %q", w)
	}
	if _, err := c.Machine(ctx, "good", "junk"); client.StatusCode(err) != http.StatusInternalServerError || !strings.Contains(err.Error(), "stored record is corrupt: machine.good.junk") {
		t.Errorf("GET of the corrupt machine: %v", err)
	}

	// The cluster is still planned: a scale-up gets its machine.
	if _, err := c.Scale(ctx, "good", "md-0", 2); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, time.Minute, "good's second worker", func() bool { return len(mm.machines("good")) == 3 })
}
