package controlplanehosted

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/internal/supervise"
	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/secrets/pki"
)

// The steps of 1 → 3 and 3 → 1, each taken by applying what the step does
// to the state (as scale.go's actions do once they succeed): etcd members
// one at a time before the API servers going up, the API servers first
// and etcd-0 last going down; the walk ends at a settled state. Any state
// met on the way resumes to the same end (kill -9 at any point: the state
// saved is one of these).
func TestNextStepWalksOneToThreeAndBack(t *testing.T) {
	st := &state{Cluster: "c", Version: "v1.37.2", Replicas: 1, Members: []member{{EtcdClient: 100, EtcdPeer: 101, APIServer: 102, Version: "v1.37.2"}}}
	st.Members[0].EtcdServers = st.apiEtcdServers()
	if busy, _ := st.scaling(); busy {
		t.Fatal("one replica settled reads as scaling")
	}
	port := 200
	apply := func(st *state, step string, i int) {
		switch step {
		case stepAppendMember:
			st.Members = append(st.Members, member{EtcdClient: port, EtcdPeer: port + 1, APIServer: port + 2, Etcd: etcdAdding, Joined: true, NoAPIServer: true})
			port += 10
		case stepAddMember:
			st.Members[i].Etcd = ""
		case stepStartAPIServer:
			st.Members[i].NoAPIServer = false
			st.Members[i].EtcdServers = st.apiEtcdServers()
		case stepRestartAPI:
			st.Members[i].EtcdServers = st.apiEtcdServers()
		case stepStopAPIServer:
			st.Members[i].NoAPIServer = true
		case stepMarkRemoval, stepAbortAdd:
			st.Members[i].Etcd = etcdRemoving
		case stepRemoveMember:
			st.Members = st.Members[:i]
		default:
			t.Fatalf("step %q", step)
		}
	}
	walk := func(want int) []string {
		st.Replicas = want
		var steps []string
		for range 30 {
			step, i := nextStep(st, want)
			if step == stepDone {
				return steps
			}
			steps = append(steps, fmt.Sprintf("%s %d", step, i))
			apply(st, step, i)
		}
		t.Fatalf("no end after %v", steps)
		return nil
	}
	up := fmt.Sprint(walk(3))
	if want := "[append-member 1 add-member 1 append-member 2 add-member 2 start-apiserver 1 start-apiserver 2 restart-apiserver 0]"; up != want {
		t.Fatalf("1 → 3: %s, want %s", up, want)
	}
	if busy, _ := st.scaling(); busy || len(st.Members) != 3 {
		t.Fatalf("after 1 → 3: scaling %v, %d members", busy, len(st.Members))
	}
	for i, m := range st.Members {
		if m.EtcdServers != "https://127.0.0.1:100,https://127.0.0.1:200,https://127.0.0.1:210" {
			t.Fatalf("API server %d on %s", i, m.EtcdServers)
		}
	}
	down := fmt.Sprint(walk(1))
	if want := "[restart-apiserver 0 stop-apiserver 2 stop-apiserver 1 mark-removal 2 remove-member 2 mark-removal 1 remove-member 1]"; down != want {
		t.Fatalf("3 → 1: %s, want %s", down, want)
	}
	if st.Members[0].EtcdServers != "https://127.0.0.1:100" || len(st.Members) != 1 {
		t.Fatalf("after 3 → 1: %+v", st.Members)
	}

	// Down again while the second member was being added: its add stops
	// and it is removed; nothing starts an API server beside it.
	st.Replicas = 3
	apply(st, stepAppendMember, 1)
	if busy, msg := st.scaling(); !busy || msg != "2 etcd members now" {
		t.Fatalf("halfway: %v %q", busy, msg)
	}
	if got := fmt.Sprint(walk(1)); got != "[abort-add 1 remove-member 1]" {
		t.Fatalf("abort: %s", got)
	}
}

// etcdBin is a directory with etcd and etcdctl (CAPN_KUBE_BIN, else make
// kube's cache); the test is skipped without one.
func etcdBin(t *testing.T) string {
	t.Helper()
	var dirs []string
	if l := os.Getenv("CAPN_KUBE_BIN"); l != "" {
		dirs = filepath.SplitList(l)
	} else if home, err := os.UserHomeDir(); err == nil {
		dirs, _ = filepath.Glob(filepath.Join(home, ".cache", "capn", "kube", "*", "bin"))
	}
	for _, d := range dirs {
		_, e1 := os.Stat(filepath.Join(d, "etcd"))
		_, e2 := os.Stat(filepath.Join(d, "etcdctl"))
		if e1 == nil && e2 == nil {
			return d
		}
	}
	if os.Getenv("CAPN_REQUIRE_KUBE") == "1" {
		t.Fatal("CAPN_REQUIRE_KUBE=1 but no etcd and etcdctl: build them with make kube")
	}
	t.Skip("no etcd and etcdctl (CAPN_KUBE_BIN or ~/.cache/capn/kube; make kube builds them)")
	return ""
}

// The etcd half of a scale on the real etcd: members added one at a time
// (learner, started with initial-cluster-state=existing, promoted,
// healthy), a key written at one member read at three; then removed from
// the last, the leader among them (leadership moves to etcd-0 first),
// their processes, data dirs and certificates gone, the key still there.
func TestScaleEtcdMembersOneToThreeAndBack(t *testing.T) {
	testkit.RequireLinux(t)
	bin := etcdBin(t)
	now := time.Now()
	var set pki.Set
	var err error
	for _, kp := range []*pki.KeyPair{&set.CA, &set.EtcdCA, &set.FrontProxyCA} {
		if *kp, err = pki.NewCA("test", now); err != nil {
			t.Fatal(err)
		}
	}
	if set.ServiceAccount, err = pki.NewServiceAccountKey(); err != nil {
		t.Fatal(err)
	}
	st, err := newState("c", "v0", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := layout{dir: t.TempDir()}
	if err := writePKI(l, st, set, now); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer // the steps' messages
	c := &controlPlane{l: l, st: st, log: zerolog.New(&logged), bins: map[string]string{"v0": bin}, changed: make(chan struct{}, 1),
		now: time.Now, ready: map[int]bool{}}
	c.sup = &supervise.Supervisor{LogDir: l.logs(), Log: zerolog.Nop()}
	t.Cleanup(c.sup.Stop)
	if err := c.sup.Start(c.etcd(0, bin)); err != nil {
		t.Fatal(err)
	}
	ctl, err := c.etcdctl(bin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	endpoint := func(i int) []string { return []string{url(c.st.Members[i].EtcdClient)} }
	if err := poll(ctx, time.Minute, "etcd-0 healthy", func() error {
		_, err := ctl.run(ctx, endpoint(0), "endpoint", "health")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.run(ctx, endpoint(0), "put", "/kept", "v"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if err := c.appendMember(); err != nil {
			t.Fatal(err)
		}
		if err := c.addMember(ctx, i, 3, time.Minute); err != nil {
			t.Fatal(err)
		}
		if c.st.Members[i].Etcd != "" || c.st.Progress != fmt.Sprintf("etcd member %d of 3 added", i+1) {
			t.Fatalf("after adding member %d: %+v, progress %q", i, c.st.Members[i], c.st.Progress)
		}
	}
	list, err := ctl.memberList(ctx, endpoint(0))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range list.Members {
		if m.IsLearner {
			t.Fatalf("%s still a learner", m.Name)
		}
		names = append(names, m.Name)
	}
	slices.Sort(names)
	if fmt.Sprint(names) != "[etcd-0 etcd-1 etcd-2]" {
		t.Fatalf("members %v", names)
	}
	if out, err := ctl.run(ctx, endpoint(2), "get", "--print-value-only", "/kept"); err != nil || strings.TrimSpace(string(out)) != "v" {
		t.Fatalf("the key at etcd-2: %q %v", out, err)
	}
	// The member removed first leads: leadership moves to etcd-0.
	leader := list.byPeer(url(c.st.Members[2].EtcdPeer))
	all := []string{url(c.st.Members[0].EtcdClient), url(c.st.Members[1].EtcdClient), url(c.st.Members[2].EtcdClient)}
	if err := poll(ctx, time.Minute, "etcd-2 leading", func() error {
		if id, err := ctl.leader(ctx, c.st.Members[0]); err != nil || id == leader.ID {
			return err
		}
		_, err := ctl.run(ctx, all, "move-leader", leader.hexID())
		return errors.Join(err, errors.New("moved; checking"))
	}); err != nil {
		t.Fatal(err)
	}
	for i := 2; i >= 1; i-- {
		c.st.Members[i].Etcd = etcdRemoving
		if err := c.removeMember(ctx, i, time.Minute); err != nil {
			t.Fatal(err)
		}
		if len(c.st.Members) != i {
			t.Fatalf("%d members after removing etcd-%d", len(c.st.Members), i)
		}
		for _, gone := range []string{l.etcdData(i), l.pkiFile(fmt.Sprintf("etcd/server-%d.crt", i)), l.pkiFile(fmt.Sprintf("etcd/peer-%d.key", i))} {
			if _, err := os.Stat(gone); !os.IsNotExist(err) {
				t.Fatalf("%s after removing etcd-%d: %v", gone, i, err)
			}
		}
		if c.runs(etcdName(i)) {
			t.Fatalf("etcd-%d still supervised", i)
		}
	}
	if !strings.Contains(logged.String(), "etcd leadership moved from etcd-2 to etcd-0") {
		t.Fatalf("no leadership move logged:\n%s", logged.String())
	}
	list, err = ctl.memberList(ctx, endpoint(0))
	if err != nil || len(list.Members) != 1 || list.Members[0].Name != "etcd-0" {
		t.Fatalf("members after 3 → 1: %+v %v", list, err)
	}
	if out, err := ctl.run(ctx, endpoint(0), "get", "--print-value-only", "/kept"); err != nil || strings.TrimSpace(string(out)) != "v" {
		t.Fatalf("the key at etcd-0: %q %v", out, err)
	}
}
