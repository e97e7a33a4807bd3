package e2e

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sim"
	"github.com/capn-dev/capn/schemas/backupfile"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// creates counts the sim's CreateMachine calls per machine: a machine
// created again after a restore would show here.
type creates struct {
	mu sync.Mutex
	n  map[string]int
}

func newCreates() *creates { return &creates{n: map[string]int{}} }

func (c *creates) wrap(p *sim.Provider) sdk.Provider { return &countingSim{Provider: p, c: c} }

func (c *creates) of(cluster, machine string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[cluster+"/"+machine]
}

// countingSim is the sim (its optional interfaces promoted) counting
// creates.
type countingSim struct {
	*sim.Provider
	c *creates
}

func (s *countingSim) CreateMachine(ctx context.Context, req *capnv1.CreateMachine) (*capnv1.InfraMachine, error) {
	s.c.mu.Lock()
	s.c.n[req.GetCluster()+"/"+req.GetMachine()]++
	s.c.mu.Unlock()
	return s.Provider.CreateMachine(ctx, req)
}

// fleetCluster is one small cluster of the fleet: one control plane, two
// workers, on the sim.
func fleetCluster(i int) string {
	return fmt.Sprintf(`apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: f%03d
spec:
  kubernetesVersion: v1.33.4
  controlPlane: {provider: sim, replicas: 1}
  workerPools:
  - {name: md-0, provider: sim, replicas: 2}
`, i)
}

func newRing(t *testing.T) *seal.Keyring {
	t.Helper()
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

// deployment starts a whole capn deployment (every service, the gateway
// and the backup service) on a server of its own.
func deployment(t *testing.T, ring *seal.Keyring, c *creates) *harness.System {
	t.Helper()
	sys := harness.New(t, harness.Options{Keyring: ring, WrapSim: c.wrap})
	sys.StartAll()
	sys.Start(harness.Gateway)
	sys.Start(harness.Backup)
	return sys
}

func runningMachines(t *testing.T, sys *harness.System) int {
	n := 0
	for _, st := range harness.Entries(t, sys.Observed, sys.MachineStatuses, keys.MachinePrefix, nil) {
		if st.GetPhaseValue() == capnv1.MachineRunning {
			n++
		}
	}
	return n
}

// TestBackupDuringAFleetCreateRestoresIntoAnEmptyDeployment is the proof
// of issue 22's consistency and restore: a backup taken while 100
// clusters are being created, restored into another, empty deployment
// (the first one lost), comes back to a state the planner accepts: every
// cluster Ready, and no machine the backup recorded infrastructure for
// created again — its provider adopted it, with the same provider id.
func TestBackupDuringAFleetCreateRestoresIntoAnEmptyDeployment(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	const n, perCluster = 100, 3
	ring := newRing(t)
	src := deployment(t, ring, newCreates())
	ctx := t.Context()
	start := time.Now()
	for i := range n {
		src.Apply(fleetCluster(i))
	}
	// Mid-create: a third of the machines Running.
	testkit.WaitFor(t, 3*time.Minute, "a third of the fleet's machines Running", func() bool { return runningMachines(t, src) >= n*perCluster/3 })
	body, name, err := src.Client().Backup(ctx, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	file, err := io.ReadAll(body)
	_ = body.Close()
	if err != nil {
		t.Fatal(err)
	}
	backedUpAt := time.Since(start)
	f, err := backupfile.Decode(file)
	if err == nil {
		err = f.Check()
	}
	if err != nil {
		t.Fatal(err)
	}
	m := f.Manifest
	if m.GetName() != name || len(m.GetClusters()) != n {
		t.Fatalf("backup %s (answered as %s) holds %d clusters", m.GetName(), name, len(m.GetClusters()))
	}
	// What the backup says: desired machines, live infrastructure, phases.
	desired := map[string]*capnv1.Machine{}
	live := map[string]*capnv1.InfraMachine{}
	phases := map[string]int{}
	for _, e := range f.Entries {
		k, _ := keys.Parse(e.GetKey())
		switch {
		case e.GetBucket() == "desired" && k.Kind == keys.KindMachine:
			dm := &capnv1.Machine{}
			if err := proto.Unmarshal(e.GetValue(), dm); err != nil {
				t.Fatal(err)
			}
			desired[k.Cluster+"/"+k.Name] = dm
		case e.GetBucket() == "observed" && k.Kind == keys.KindInfra && k.Name != keys.ClusterObject:
			im := &capnv1.InfraMachine{}
			if err := proto.Unmarshal(e.GetValue(), im); err != nil {
				t.Fatal(err)
			}
			if s := im.GetStateValue(); s == capnv1.InfraCreating || s == capnv1.InfraRunning {
				live[k.Cluster+"/"+k.Name] = im
			}
		case e.GetBucket() == "observed" && k.Kind == keys.KindMachine:
			st := &capnv1.MachineStatus{}
			if err := proto.Unmarshal(e.GetValue(), st); err != nil {
				t.Fatal(err)
			}
			phases[st.GetPhase()]++
		}
	}
	var reads []string
	for _, b := range m.GetBuckets() {
		reads = append(reads, fmt.Sprintf("%s %d keys at seq %d in %s", b.GetName(), b.GetKeys(), b.GetSequence(), b.GetReadTook().AsDuration().Round(time.Microsecond)))
	}
	t.Logf("backup %s after %s of the create: %d bytes, %d entries, the three reads within %s (%s); %d desired machines, %d with live infrastructure; statuses %v",
		name, backedUpAt.Round(time.Millisecond), len(file), m.GetEntries(), m.GetSpread().AsDuration().Round(time.Microsecond), strings.Join(reads, ", "),
		len(desired), len(live), phases)
	if len(live) == 0 || len(live) == n*perCluster {
		t.Fatalf("the backup was not taken mid-create: %d of %d machines with live infrastructure", len(live), n*perCluster)
	}
	for k, im := range live {
		if desired[k] == nil {
			t.Errorf("torn backup: infrastructure %s without its desired machine", k)
		}
		_ = im
	}

	// The first deployment is lost; a new, empty one gets the file.
	src.KillAll()
	dstCreates := newCreates()
	dst := deployment(t, ring, dstCreates)
	restoreStart := time.Now()
	report, err := dst.Client().Restore(ctx, file, client.RestoreOptions{AdoptWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	restoreTook := time.Since(restoreStart)
	if len(report.GetRestored()) != n || len(report.GetConflicts()) != 0 || !report.GetKeysChecked() {
		t.Fatalf("report: restored %d, conflicts %v, keys checked %v", len(report.GetRestored()), report.GetConflicts(), report.GetKeysChecked())
	}
	t.Logf("restore answered in %s: written %v, %d adoptions (%d machines + %d clusters), %d adopted, waiting %v, %d records dropped",
		restoreTook.Round(time.Millisecond), report.GetWritten(), report.GetAdoptions(), len(live), report.GetAdoptions()-uint64(len(live)),
		report.GetAdopted(), report.GetWaiting(), len(report.GetDropped()))
	for _, d := range report.GetDropped() {
		t.Logf("dropped: %s", d)
	}

	readyStart := time.Now()
	testkit.WaitFor(t, 5*time.Minute, "every restored cluster Ready", func() bool {
		for i := range n {
			if !dst.IsReady(fmt.Sprintf("f%03d", i)) {
				return false
			}
		}
		return true
	})
	t.Logf("every cluster Ready %s after the restore answered", time.Since(readyStart).Round(time.Millisecond))

	// No machine the backup recorded infrastructure for was created again;
	// each kept its provider id and uid. The others were created once.
	machines := harness.Entries(t, dst.Desired, dst.Machines, keys.MachinePrefix, nil)
	infra := harness.Entries(t, dst.Observed, dst.Infra, "infra.sim.", func(k string) bool { return strings.HasSuffix(k, "._") })
	perClusterNow := map[string]int{}
	recreated, createdAfter, kept := 0, 0, 0
	var names []string
	for key, dm := range machines {
		k, _ := keys.Parse(key)
		id := k.Cluster + "/" + k.Name
		names = append(names, id)
		perClusterNow[k.Cluster]++
		im := infra[keys.Infra("sim", k.Cluster, k.Name)]
		switch old := desired[id]; {
		case live[id] != nil:
			kept++
			if c := dstCreates.of(k.Cluster, k.Name); c != 0 {
				recreated++
				t.Errorf("%s: created %d times after the restore, though its infrastructure was adopted", id, c)
			}
			if im.GetProviderId() != live[id].GetProviderId() {
				t.Errorf("%s: provider id %q after the restore, %q in the backup", id, im.GetProviderId(), live[id].GetProviderId())
			}
			if dm.GetMetadata().GetUid() != old.GetMetadata().GetUid() {
				t.Errorf("%s: uid %s after the restore, %s in the backup: replaced", id, dm.GetMetadata().GetUid(), old.GetMetadata().GetUid())
			}
		default:
			createdAfter++
			if c := dstCreates.of(k.Cluster, k.Name); c > 1 {
				t.Errorf("%s: created %d times", id, c)
			}
			if old != nil && dm.GetMetadata().GetUid() != old.GetMetadata().GetUid() {
				t.Errorf("%s: uid %s after the restore, %s in the backup: replaced", id, dm.GetMetadata().GetUid(), old.GetMetadata().GetUid())
			}
		}
	}
	for i := range n {
		if c := fmt.Sprintf("f%03d", i); perClusterNow[c] != perCluster {
			t.Errorf("cluster %s has %d machines, want %d", c, perClusterNow[c], perCluster)
		}
	}
	sort.Strings(names)
	if recreated != 0 {
		t.Fatalf("%d machines created again", recreated)
	}
	t.Logf("after the restore: %d machines; %d adopted with their provider ids and uids (none created again), %d created (no infrastructure in the backup)",
		len(machines), kept, createdAfter)
	_ = store.DefaultTimeout
}
