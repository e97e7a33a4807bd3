package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
)

// agent answers the etcd commands of one machine as capn-node does
// (cmd/capn-node/agent/etcd.go: chunks then a final reply), over the real
// server; it records the ops and the restore file it is sent.
type agent struct {
	name, peer string
	snapshot   []byte
	failOp     string // an op answered with an error
	mu         sync.Mutex
	ops        []string
	file       bytes.Buffer
}

func (a *agent) serve(t *testing.T, nc *nats.Conn, cluster string) {
	t.Helper()
	sub, err := nc.Subscribe(keys.EtcdCommand(cluster, a.name, "*"), func(m *nats.Msg) {
		op := m.Subject[strings.LastIndex(m.Subject, ".")+1:]
		cmd := &capnv1.EtcdNodeCommand{}
		_ = proto.Unmarshal(m.Data, cmd)
		a.mu.Lock()
		a.ops = append(a.ops, op)
		reply := &capnv1.EtcdNodeReply{Member: &capnv1.EtcdMemberInfo{Name: a.name, PeerUrls: []string{a.peer}}}
		switch {
		case op == a.failOp:
			reply.Error = op + " failed here"
		case op == opSnapshot:
			for i, off := 1, 0; off < len(a.snapshot); i, off = i+1, off+etcdChunkBytes {
				c := nats.NewMsg(m.Reply)
				c.Header.Set(headerEtcdSeq, strconv.Itoa(i))
				c.Data = a.snapshot[off:min(off+etcdChunkBytes, len(a.snapshot))]
				_ = nc.PublishMsg(c)
			}
			sum := sha256.Sum256(a.snapshot)
			reply.Size, reply.Sha256, reply.Revision = uint64(len(a.snapshot)), hex.EncodeToString(sum[:]), 42
			reply.Members = []*capnv1.EtcdMemberInfo{{Name: "cp-0"}, {Name: "cp-1"}}
		case op == opRestoreChunk:
			if cmd.GetOffset() == 0 {
				a.file.Reset()
			}
			a.file.Write(cmd.GetChunk())
		case op == opRestorePrepare:
			sum := sha256.Sum256(a.file.Bytes())
			if hex.EncodeToString(sum[:]) != cmd.GetSha256() || !strings.Contains(cmd.GetInitialCluster(), a.name+"="+a.peer) || cmd.GetToken() == "" {
				reply.Error = "bad prepare " + cmd.GetInitialCluster()
			}
		case op == opHealth:
			reply.EtcdHealthy, reply.ApiReady = true, true
		}
		a.mu.Unlock()
		data, _ := proto.Marshal(reply)
		f := nats.NewMsg(m.Reply)
		f.Header.Set(headerEtcdFinal, "1")
		f.Data = data
		_ = nc.PublishMsg(f)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func (a *agent) opsSeen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.ops...)
}

func putProto(t *testing.T, js jetstream.JetStream, bucket, key string, m proto.Message) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := proto.Marshal(m)
	if _, err := kv.Put(context.Background(), key, b); err != nil {
		t.Fatal(err)
	}
}

func ask[T proto.Message](t *testing.T, nc *nats.Conn, verb string, req proto.Message, out T) T {
	t.Helper()
	data, _ := proto.Marshal(req)
	var m *nats.Msg
	var err error
	// The service answers once it has started.
	natstest.WaitFor(t, 10*time.Second, "the backup service answers "+verb, func() bool {
		m, err = nc.Request(keys.BackupRequest(verb), data, 30*time.Second)
		return !errors.Is(err, nats.ErrNoResponders)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(m.Data, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// etcd snapshots on embedded NATS with the agents' protocol: taken from
// the first control-plane machine that gives one, sealed (bound to the
// cluster and name) in the etcd-snapshots object store, listed, pruned to
// the cluster's keep; refused for a cluster capn does not run; restored
// on every member (health, the file in chunks, prepare, start, health),
// and aborted on every member when one cannot prepare.
func TestEtcdSnapshotsAndRestore(t *testing.T) {
	key, _ := seal.GenerateKey()
	ring, _ := seal.NewKeyring(key)
	js, _ := run(t, Config{Keyring: ring, EtcdWait: 5 * time.Second, EtcdRestoreWait: 20 * time.Second})
	nc := js.Conn()
	ctx := context.Background()
	kubeLocal := &capnv1.ClusterSpec{Bootstrap: &capnv1.BootstrapSpec{Provider: KubeLocal},
		EtcdSnapshots: &capnv1.EtcdSnapshotPolicy{Keep: 2}}
	putProto(t, js, events.BucketDesired, keys.Cluster("c1"), &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "c1"}, Spec: kubeLocal})
	putProto(t, js, events.BucketDesired, keys.Cluster("c2"), &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "c2"}, Spec: &capnv1.ClusterSpec{}})
	for _, m := range []string{"cp-0", "cp-1"} {
		putProto(t, js, events.BucketDesired, keys.Machine("c1", m), &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: m},
			Spec: &capnv1.MachineSpec{Cluster: "c1", Role: "control-plane"}})
	}
	putProto(t, js, events.BucketDesired, keys.Machine("c1", "w-0"), &capnv1.Machine{Spec: &capnv1.MachineSpec{Cluster: "c1", Role: "worker"}})
	db := bytes.Repeat([]byte("etcd bbolt page "), 80000) // 1.28 MB: three chunks
	cp0 := &agent{name: "cp-0", peer: "https://127.0.0.1:2380", snapshot: db, failOp: opSnapshot}
	cp1 := &agent{name: "cp-1", peer: "https://127.0.0.3:2380", snapshot: db}
	cp0.serve(t, nc, "c1")
	cp1.serve(t, nc, "c1")

	var infos []*capnv1.EtcdSnapshotInfo
	for range 3 {
		res := ask(t, nc, VerbEtcdSnapshot, &capnv1.EtcdSnapshotRequest{Cluster: "c1", RequestedBy: "test"}, &capnv1.EtcdSnapshotResult{})
		if res.GetError() != nil {
			t.Fatalf("snapshot: %v", res.GetError())
		}
		infos = append(infos, res.GetSnapshot())
		natstest.WaitFor(t, 5*time.Second, "the next millisecond (names are by time)", func() bool {
			return time.Now().UTC().Format("20060102T150405.000Z") != strings.TrimSuffix(res.GetSnapshot().GetName(), "-api")
		})
	}
	sum := sha256.Sum256(db)
	if i := infos[2]; i.GetMachine() != "cp-1" || i.GetSize() != uint64(len(db)) || i.GetSha256() != hex.EncodeToString(sum[:]) ||
		i.GetRevision() != 42 || len(i.GetMembers()) != 2 || i.GetSealKeyId() != ring.PrimaryID() || i.GetTrigger() != TriggerAPI {
		t.Errorf("snapshot info %v", i)
	}
	list := ask(t, nc, VerbEtcdList, &capnv1.EtcdSnapshotListRequest{Cluster: "c1"}, &capnv1.EtcdSnapshotList{})
	if got := list.GetSnapshots(); len(got) != 2 || got[0].GetName() != infos[1].GetName() || got[1].GetName() != infos[2].GetName() {
		t.Errorf("listed %v, want the newest 2 of %v", got, infos)
	}
	// Sealed, and bound to its cluster and name: the same bytes under
	// another cluster's name do not open.
	o, err := js.ObjectStore(ctx, events.ObjectEtcdSnapshots)
	if err != nil {
		t.Fatal(err)
	}
	name := infos[2].GetName()
	raw, err := o.GetBytes(ctx, EtcdObjectName("c1", name))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("etcd bbolt page")) {
		t.Error("the stored snapshot is not sealed")
	}
	if got, err := ring.Open(etcdSealName("c1", name), raw); err != nil || !bytes.Equal(got, db) {
		t.Errorf("open the stored snapshot: %v", err)
	}
	if _, err := ring.Open(etcdSealName("c2", name), raw); err == nil {
		t.Error("c1's snapshot opens as c2's")
	}
	if _, err := o.PutBytes(ctx, EtcdObjectName("c2", name), raw); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct{ cluster, code, msg string }{
		{"c2", CodeInvalid, "not run by capn (bootstrap provider kubeadm)"},
		{"nope", CodeNotFound, "no cluster nope"},
		{"Bad_Name", CodeInvalid, "cluster \"Bad_Name\""},
	} {
		res := ask(t, nc, VerbEtcdSnapshot, &capnv1.EtcdSnapshotRequest{Cluster: tt.cluster}, &capnv1.EtcdSnapshotResult{})
		if res.GetError().GetCode() != tt.code || !strings.Contains(res.GetError().GetMessage(), tt.msg) {
			t.Errorf("snapshot of %s: %v, want %s %q", tt.cluster, res.GetError(), tt.code, tt.msg)
		}
	}

	// A restore on every member.
	res := ask(t, nc, VerbEtcdRestore, &capnv1.EtcdRestoreRequest{Cluster: "c1", Snapshot: name}, &capnv1.EtcdRestoreResult{})
	if res.GetError() != nil {
		t.Fatalf("restore: %v", res.GetError())
	}
	if len(res.GetMembers()) != 2 || res.GetSnapshot().GetName() != name {
		t.Errorf("restore result %v", res)
	}
	for _, a := range []*agent{cp0, cp1} {
		ops := strings.Join(compact(a.opsSeen()), ",")
		if !strings.HasSuffix(ops, "health,restore-chunk,restore-prepare,restore-start,health") {
			t.Errorf("%s saw %s", a.name, ops)
		}
		if !bytes.Equal(a.file.Bytes(), db) {
			t.Errorf("%s got a %d-byte file, want the %d-byte snapshot", a.name, a.file.Len(), len(db))
		}
	}
	// A snapshot the cluster does not have.
	if res := ask(t, nc, VerbEtcdRestore, &capnv1.EtcdRestoreRequest{Cluster: "c1", Snapshot: "nope"}, &capnv1.EtcdRestoreResult{}); res.GetError().GetCode() != CodeNotFound {
		t.Errorf("restore of a snapshot that is not there: %v", res.GetError())
	}

	// One member cannot prepare: every member aborts, none starts.
	cp1.failOp = opRestorePrepare
	res = ask(t, nc, VerbEtcdRestore, &capnv1.EtcdRestoreRequest{Cluster: "c1", Snapshot: name}, &capnv1.EtcdRestoreResult{})
	if res.GetError() == nil || !strings.Contains(res.GetError().GetMessage(), "aborted") {
		t.Fatalf("restore with a failing prepare: %v", res.GetError())
	}
	for _, a := range []*agent{cp0, cp1} {
		ops := compact(a.opsSeen())
		if ops[len(ops)-1] != opRestoreAbort || strings.Count(strings.Join(ops, ","), opRestoreStart) != 1 {
			t.Errorf("%s saw %v after a failed prepare", a.name, ops)
		}
	}
}

// compact drops repeated ops (the chunks).
func compact(ops []string) []string {
	var out []string
	for _, o := range ops {
		if len(out) == 0 || out[len(out)-1] != o {
			out = append(out, o)
		}
	}
	return out
}

// A backup service without a key refuses etcd snapshots, saying how to
// give it one.
func TestEtcdSnapshotsNeedAKey(t *testing.T) {
	t.Setenv(seal.KeyEnv, "") // restored after the test
	_ = os.Unsetenv(seal.KeyEnv)
	js, _ := run(t, Config{})
	res := ask(t, js.Conn(), VerbEtcdSnapshot, &capnv1.EtcdSnapshotRequest{Cluster: "c1"}, &capnv1.EtcdSnapshotResult{})
	if res.GetError().GetCode() != CodeUnavailable || !strings.Contains(res.GetError().GetMessage(), "--secrets-key-file") {
		t.Errorf("without a key: %v", res.GetError())
	}
}

func TestEtcdDue(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	every := &capnv1.EtcdSnapshotPolicy{Every: durationpb.New(time.Hour)}
	at := func(d time.Duration) *timestamppb.Timestamp { return timestamppb.New(now.Add(d)) }
	tests := []struct {
		name   string
		p      *capnv1.EtcdSnapshotPolicy
		st     *capnv1.EtcdSnapshotStatus
		want   time.Time
		wantOK bool
	}{
		{name: "no policy", p: nil},
		{name: "no interval", p: &capnv1.EtcdSnapshotPolicy{Keep: 3}},
		{name: "never taken: one interval from now", p: every, want: now.Add(time.Hour), wantOK: true},
		{name: "the recorded next", p: every, st: &capnv1.EtcdSnapshotStatus{Every: durationpb.New(time.Hour), Next: at(10 * time.Minute)}, want: now.Add(10 * time.Minute), wantOK: true},
		{name: "interval changed: from the last attempt", p: every, st: &capnv1.EtcdSnapshotStatus{Every: durationpb.New(time.Minute), Next: at(time.Minute), LastAttempt: at(-30 * time.Minute)}, want: now.Add(30 * time.Minute), wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := EtcdDue(tt.p, tt.st, now)
			if ok != tt.wantOK || !got.Equal(tt.want) {
				t.Errorf("EtcdDue = %v %v, want %v %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestInitialCluster(t *testing.T) {
	got := InitialCluster([]*capnv1.EtcdMemberInfo{
		{Name: "cp-1", PeerUrls: []string{"https://127.0.0.3:2380"}},
		{Name: "cp-0", PeerUrls: []string{"https://127.0.0.1:2380"}},
	})
	if want := "cp-0=https://127.0.0.1:2380,cp-1=https://127.0.0.3:2380"; got != want {
		t.Errorf("InitialCluster = %s, want %s", got, want)
	}
}

// Scheduled etcd snapshots: taken every interval from the cluster's
// policy, recorded in observed backup.etcd-<cluster> with
// EtcdSnapshotSucceeded True; when the machines cannot give one, the
// condition turns False with the failures counted.
func TestScheduledEtcdSnapshots(t *testing.T) {
	if testing.Short() {
		t.Skip("scheduled every second: skipped with -short")
	}
	key, _ := seal.GenerateKey()
	ring, _ := seal.NewKeyring(key)
	js, _ := run(t, Config{Keyring: ring, EtcdWait: 5 * time.Second, EtcdScheduleTick: 100 * time.Millisecond})
	nc := js.Conn()
	putProto(t, js, events.BucketDesired, keys.Cluster("c1"), &capnv1.Cluster{Metadata: &capnv1.ObjectMeta{Name: "c1"},
		Spec: &capnv1.ClusterSpec{Bootstrap: &capnv1.BootstrapSpec{Provider: KubeLocal},
			EtcdSnapshots: &capnv1.EtcdSnapshotPolicy{Every: durationpb.New(time.Second), Keep: 2}}})
	putProto(t, js, events.BucketDesired, keys.Machine("c1", "cp-0"), &capnv1.Machine{Spec: &capnv1.MachineSpec{Cluster: "c1", Role: "control-plane"}})
	cp0 := &agent{name: "cp-0", peer: "https://127.0.0.1:2380", snapshot: bytes.Repeat([]byte("db"), 1000)}
	cp0.serve(t, nc, "c1")
	kv, err := js.KeyValue(context.Background(), events.BucketObserved)
	if err != nil {
		t.Fatal(err)
	}
	status := func() *capnv1.EtcdSnapshotStatus {
		st := &capnv1.EtcdSnapshotStatus{}
		if e, err := kv.Get(context.Background(), keys.EtcdSnapshotStatus("c1")); err == nil {
			_ = proto.Unmarshal(e.Value(), st)
		}
		return st
	}
	cond := func(st *capnv1.EtcdSnapshotStatus) *capnv1.Condition {
		for _, c := range st.GetConditions() {
			if c.GetType() == ConditionEtcdSnapshotSucceeded {
				return c
			}
		}
		return nil
	}
	var st *capnv1.EtcdSnapshotStatus
	natstest.WaitFor(t, 20*time.Second, "two scheduled snapshots, recorded", func() bool {
		st = status()
		list := ask(t, nc, VerbEtcdList, &capnv1.EtcdSnapshotListRequest{Cluster: "c1"}, &capnv1.EtcdSnapshotList{}).GetSnapshots()
		return len(list) == 2 && st.GetLastSnapshot() == list[1].GetName() && list[1].GetTrigger() == TriggerSchedule
	})
	if c := cond(st); c.GetStatus() != "True" || st.GetKeep() != 2 || st.GetEvery().AsDuration() != time.Second || st.GetNext() == nil {
		t.Errorf("status %v", st)
	}
	cp0.mu.Lock()
	cp0.failOp = opSnapshot
	cp0.mu.Unlock()
	natstest.WaitFor(t, 20*time.Second, "EtcdSnapshotSucceeded False after two failures", func() bool {
		st = status()
		return cond(st).GetStatus() == "False" && st.GetConsecutiveFailures() >= 2
	})
	if c := cond(st); c.GetReason() != ReasonEtcdSnapshotFailed || !strings.Contains(c.GetMessage(), "snapshot failed here") || st.GetLastError() == "" {
		t.Errorf("failed status %v", st)
	}
}
