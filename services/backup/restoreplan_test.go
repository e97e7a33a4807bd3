package backup

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/schemas/backupfile"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/seal"
)

var now = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

type fixture struct {
	ring    *seal.Keyring
	entries []*capnv1.BackupEntry
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	key, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ring: ring}
}

func (f *fixture) add(t *testing.T, bucket, key string, m proto.Message) {
	t.Helper()
	v, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if bucket == "secrets" {
		if v, err = f.ring.Seal(key, v); err != nil {
			t.Fatal(err)
		}
	}
	f.entries = append(f.entries, &capnv1.BackupEntry{Bucket: bucket, Key: key, Value: v})
}

// cluster adds a cluster with machines: each desired, with a Running
// status, a ready node and live sim infrastructure.
func (f *fixture) cluster(t *testing.T, c string, machines ...string) {
	t.Helper()
	f.add(t, "desired", "cluster."+c, &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: c, Uid: "u-" + c}})
	f.add(t, "observed", "cluster."+c, &capnv1.ClusterStatus{Phase: "Ready"})
	f.add(t, "observed", "infra.sim."+c+"._", &capnv1.InfraCluster{Provider: "sim", Cluster: c, Ready: true})
	f.add(t, "observed", "secrets."+c, &capnv1.ClusterSecretsStatus{Cluster: c, PkiReady: true})
	f.add(t, "secrets", "pki."+c, &capnv1.ClusterPKI{})
	for _, m := range machines {
		f.add(t, "desired", "machine."+c+"."+m, &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: m}, Spec: &capnv1.MachineSpec{Provider: "sim"}})
		f.add(t, "observed", "machine."+c+"."+m, &capnv1.MachineStatus{Phase: "Running", Provider: "sim", ProviderId: "sim://" + c + "/" + m})
		f.add(t, "observed", "node."+c+"."+m, &capnv1.NodeHealth{Cluster: c, Machine: m, Ready: true, LastHeartbeat: timestamppb.New(now.Add(-time.Hour))})
		f.add(t, "observed", "infra.sim."+c+"."+m, &capnv1.InfraMachine{Provider: "sim", Cluster: c, Machine: m, ProviderId: "sim://" + c + "/" + m, State: "Running"})
		f.add(t, "secrets", "bootstrap."+c+"."+m, &capnv1.BootstrapData{})
	}
}

func (f *fixture) file(t *testing.T) *backupfile.File {
	t.Helper()
	m := &capnv1.BackupManifest{Name: "b1", Buckets: []*capnv1.BackupBucket{{Name: "observed"}, {Name: "secrets"}, {Name: "desired"}}}
	for _, e := range f.entries {
		if e.GetBucket() == "desired" && strings.HasPrefix(e.GetKey(), "cluster.") {
			m.Clusters = append(m.Clusters, strings.TrimPrefix(e.GetKey(), "cluster."))
		}
	}
	slices.Sort(m.Clusters)
	data, err := backupfile.Encode(m, f.entries)
	if err != nil {
		t.Fatal(err)
	}
	file, err := backupfile.Decode(data)
	if err == nil {
		err = file.Check()
	}
	if err != nil {
		t.Fatal(err)
	}
	return file
}

func keysOf(ws []Write) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Bucket+"/"+w.Key)
	}
	return out
}

func TestPlanRestoreIntoAnEmptyDeployment(t *testing.T) {
	f := newFixture(t)
	f.cluster(t, "c1", "m1")
	// A torn read: a status and infrastructure of a machine whose desired
	// record was removed as the backup was read.
	f.add(t, "observed", "machine.c1.gone", &capnv1.MachineStatus{Phase: "Deleted"})
	f.add(t, "observed", "infra.sim.c1.gone", &capnv1.InfraMachine{ProviderId: "sim://c1/gone", State: "Running"})
	// Leftovers and what is not state.
	f.add(t, "observed", "node.c9.m1", &capnv1.NodeHealth{})
	f.add(t, "observed", "provider.sim", &capnv1.ProviderAnnouncement{Name: "sim"})
	f.add(t, "observed", "backup.schedule", &capnv1.BackupScheduleStatus{})
	// Infrastructure that is already gone is not adopted.
	f.cluster(t, "c2", "m1")
	f.add(t, "observed", "infra.sim.c2.m1", &capnv1.InfraMachine{ProviderId: "sim://c2/m1", State: "Deleted"})
	f.entries = slices.DeleteFunc(f.entries, func(e *capnv1.BackupEntry) bool {
		return e.GetKey() == "infra.sim.c2.m1" && !strings.Contains(string(e.GetValue()), "Deleted")
	})

	empty := Target{"observed": {"provider.sim": true, "backup.schedule": true}, "desired": {}, "secrets": {}}
	p, berr := PlanRestore(f.file(t), empty, PlanOptions{Source: "b1", Now: now, KeyIDs: f.ring.KeyIDs()})
	if berr != nil {
		t.Fatal(berr)
	}
	if len(p.Clusters) != 2 || p.Clusters[0].Name != "c1" || p.Clusters[1].Name != "c2" || len(p.Conflicts) != 0 || !p.KeysChecked {
		t.Fatalf("plan %+v", p)
	}
	c1 := p.Clusters[0]
	want := []string{"secrets/pki.c1", "secrets/bootstrap.c1.m1", "observed/machine.c1.m1", "observed/cluster.c1", "observed/secrets.c1",
		"observed/node.c1.m1", "desired/machine.c1.m1"}
	if got := keysOf(c1.Writes); !slices.Equal(got, want) {
		t.Errorf("c1 writes\n got %v\nwant %v", got, want)
	}
	if c1.Cluster.Key != "cluster.c1" || c1.Cluster.Bucket != "desired" {
		t.Errorf("c1's record %v", c1.Cluster)
	}
	if len(c1.Adopt) != 2 || c1.Adopt[0].Key != "infra.sim.c1._" || c1.Adopt[1].Key != "infra.sim.c1.m1" || c1.Adopt[1].Record.GetProviderId() != "sim://c1/m1" {
		t.Errorf("c1 adoptions %+v", c1.Adopt)
	}
	for _, w := range c1.Writes {
		switch w.Key {
		case "machine.c1.m1":
			if w.Bucket != "observed" {
				continue
			}
			st := &capnv1.MachineStatus{}
			if err := proto.Unmarshal(w.Value, st); err != nil {
				t.Fatal(err)
			}
			if a := st.GetAdoption(); a.GetProviderId() != "sim://c1/m1" || a.GetSource() != "b1" || !a.GetSince().AsTime().Equal(now) {
				t.Errorf("status not held for adoption: %v", st)
			}
		case "node.c1.m1":
			n := &capnv1.NodeHealth{}
			if err := proto.Unmarshal(w.Value, n); err != nil {
				t.Fatal(err)
			}
			if !n.GetLastHeartbeat().AsTime().Equal(now) {
				t.Errorf("a ready node's heartbeat not counted from the restore: %v", n.GetLastHeartbeat().AsTime())
			}
		case "pki.c1":
			if id, err := seal.KeyID(w.Value); err != nil || id != f.ring.PrimaryID() {
				t.Errorf("a secret not written as sealed: %v", err)
			}
		}
	}
	// c2's machine had no live infrastructure: its status is not held for one.
	for _, w := range p.Clusters[1].Writes {
		if w.Key == "machine.c2.m1" && w.Bucket == "observed" {
			st := &capnv1.MachineStatus{}
			_ = proto.Unmarshal(w.Value, st)
			if st.GetAdoption() == nil || st.GetAdoption().GetProviderId() != "" {
				t.Errorf("c2/m1 adoption %v, want one waiting for its desired record only", st.GetAdoption())
			}
		}
	}
	for _, want := range []string{
		"observed/machine.c1.gone: machine gone has no desired record",
		"observed/infra.sim.c1.gone: machine gone has no desired record",
		"observed/node.c9.m1: cluster c9 has no desired record in the backup",
		"observed/provider.sim: a running provider's announcement",
		"observed/backup.schedule: the backup service's own record",
		"observed/infra.sim.c2.m1: infrastructure Deleted: nothing to adopt",
	} {
		if !slices.ContainsFunc(p.Dropped, func(d string) bool { return strings.HasPrefix(d, want) }) {
			t.Errorf("not dropped: %q\n%s", want, strings.Join(p.Dropped, "\n"))
		}
	}
	if k := p.Keys(); k["desired"] != 4 || k["secrets"] != 4 || k["observed"] != 8 {
		t.Errorf("keys per bucket %v", k)
	}
}

func TestPlanRestoreRefuses(t *testing.T) {
	f := newFixture(t)
	f.cluster(t, "c1", "m1")
	f.cluster(t, "c2", "m1")
	file := f.file(t)
	other, err := seal.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	held := Target{"observed": {"node.c2.m1": true}, "desired": {}, "secrets": {}}
	tests := []struct {
		name   string
		target Target
		opts   PlanOptions
		code   string
		says   string
	}{
		{"a deployment with state", held, PlanOptions{}, CodeNotEmpty, "the deployment is not empty: it holds 1 keys of 1 clusters (c2); restore into an empty deployment, or merge"},
		{"a secret this deployment cannot open", Target{}, PlanOptions{KeyIDs: []string{other.ID()}}, CodeKeys, "sealed with key " + f.ring.PrimaryID() + ", which this deployment does not hold (it holds " + other.ID()},
		{"a cluster the backup does not hold", Target{}, PlanOptions{Clusters: []string{"c1", "c7"}}, CodeNotFound, "the backup holds no cluster c7 (it holds c1, c2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Now = now
			p, berr := PlanRestore(file, tt.target, tt.opts)
			if berr == nil || berr.GetCode() != tt.code || !strings.Contains(berr.GetMessage(), tt.says) {
				t.Fatalf("PlanRestore = %+v, %v; want %s saying %q", p, berr, tt.code, tt.says)
			}
		})
	}
}

// Merge restores what the deployment lacks and reports the rest.
func TestPlanRestoreMerge(t *testing.T) {
	f := newFixture(t)
	f.cluster(t, "c1", "m1")
	f.cluster(t, "c2", "m1")
	f.cluster(t, "c3", "m1")
	held := Target{"observed": {"node.c2.m1": true, "provider.sim": true}, "desired": {"cluster.c2": true}, "secrets": {}}
	p, berr := PlanRestore(f.file(t), held, PlanOptions{Merge: true, Now: now})
	if berr != nil {
		t.Fatal(berr)
	}
	if len(p.Clusters) != 2 || p.Clusters[0].Name != "c1" || p.Clusters[1].Name != "c3" || p.KeysChecked {
		t.Fatalf("restored %+v", p.Clusters)
	}
	if len(p.Conflicts) != 1 || p.Conflicts[0].GetCluster() != "c2" ||
		!slices.Equal(p.Conflicts[0].GetKeys(), []string{"desired/cluster.c2", "observed/node.c2.m1"}) {
		t.Fatalf("conflicts %v", p.Conflicts)
	}
	// Only the clusters asked for.
	p, berr = PlanRestore(f.file(t), held, PlanOptions{Merge: true, Clusters: []string{"c3"}, Now: now})
	if berr != nil || len(p.Clusters) != 1 || p.Clusters[0].Name != "c3" || len(p.Conflicts) != 0 {
		t.Fatalf("only c3: %+v, %v", p, berr)
	}
}

// Add-on sets and add-on secrets belong to no cluster: restored before
// the clusters with the whole file, a conflict each under merge, and the
// reason a deployment is not empty; a cluster's add-on records go with it.
func TestPlanRestoreDeploymentWideRecords(t *testing.T) {
	f := newFixture(t)
	f.cluster(t, "c1", "m1")
	f.add(t, "desired", "addonset.cni", &capnv1.AddonSet{Metadata: &capnv1.ObjectMeta{Name: "cni"}})
	f.add(t, "secrets", "addonsecret.creds", &capnv1.AddonSecret{})
	f.add(t, "observed", "addon.c1.cni", &capnv1.ClusterAddonStatus{Cluster: "c1", AddonSet: "cni"})
	file := f.file(t)

	p, berr := PlanRestore(file, Target{}, PlanOptions{Now: now, KeyIDs: f.ring.KeyIDs()})
	if berr != nil {
		t.Fatal(berr)
	}
	if got := keysOf(p.Wide); !slices.Equal(got, []string{"desired/addonset.cni", "secrets/addonsecret.creds"}) {
		t.Errorf("deployment-wide writes %v", got)
	}
	if !slices.Contains(keysOf(p.Clusters[0].Writes), "observed/addon.c1.cni") {
		t.Errorf("c1's add-on record not restored with it: %v", keysOf(p.Clusters[0].Writes))
	}
	if len(p.Dropped) != 0 {
		t.Errorf("dropped %v", p.Dropped)
	}

	held := Target{"desired": {"addonset.cni": true}}
	if _, berr := PlanRestore(file, held, PlanOptions{Now: now}); berr.GetCode() != CodeNotEmpty ||
		!strings.Contains(berr.GetMessage(), "it holds no cluster and 1 deployment-wide records (desired/addonset.cni)") {
		t.Errorf("into a deployment with an add-on set: %v", berr)
	}
	p, berr = PlanRestore(file, held, PlanOptions{Merge: true, Now: now})
	if berr != nil {
		t.Fatal(berr)
	}
	if got := keysOf(p.Wide); !slices.Equal(got, []string{"secrets/addonsecret.creds"}) || len(p.Conflicts) != 1 ||
		p.Conflicts[0].GetCluster() != "" || !slices.Equal(p.Conflicts[0].GetKeys(), []string{"desired/addonset.cni"}) {
		t.Errorf("merge: wide %v, conflicts %v", got, p.Conflicts)
	}
	p, berr = PlanRestore(file, Target{}, PlanOptions{Clusters: []string{"c1"}, Now: now})
	if berr != nil || len(p.Wide) != 0 || len(p.Clusters) != 1 {
		t.Errorf("only c1: wide %v, %v", keysOf(p.Wide), berr)
	}
}
