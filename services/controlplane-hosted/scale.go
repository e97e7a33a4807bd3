package controlplanehosted

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A replicas change of a running hosted control plane (1 ↔ 3), one step
// at a time, each step derived from state.json and etcd's member list, so
// that a stop of the service (even kill -9) at any point resumes where it
// was on the next ensure (the command is redelivered until it is done):
//
//   - up: etcd members are added one at a time, as etcd wants it: member
//     add --learner, the member started with initial-cluster-state=existing,
//     promoted once in sync, healthy before the next; then the API
//     servers beside the new members (each --etcd-servers listing every
//     member), then the first API server restarted with the whole list
//     while the new ones serve;
//   - down: the API servers that stay restarted with the members that stay
//     (while the others serve), then the others stopped (the endpoint
//     stops passing connections to them first), then the etcd members
//     from the last one at a time: leadership moved to etcd-0 if the
//     member leads, member remove, its process stopped, its data dir and
//     certificates deleted.
//
// Members are etcd-0 … etcd-<n-1>; etcd-0 always stays.

// scale makes the control plane run want etcd members and API servers.
// The per-cluster lock is held (one ensure at a time).
func (c *controlPlane) scale(ctx context.Context, want int, wait time.Duration) error {
	c.mu.Lock()
	changed := c.st.Replicas != want
	c.st.Replicas = want
	err := c.l.save(c.st)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if changed {
		c.log.Info().Int("replicas", want).Msg("scaling the hosted control plane")
		c.wake()
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		done, err := c.scaleStep(ctx, want, wait)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// Steps of a scale, in the order they are taken.
const (
	stepRemoveMember   = "remove-member"     // finish removing a member
	stepAbortAdd       = "abort-add"         // a member being added beyond want: remove it
	stepAddMember      = "add-member"        // add a member to etcd
	stepAppendMember   = "append-member"     // lay out the next member
	stepStartAPIServer = "start-apiserver"   // start a wanted member's API server
	stepRestartAPI     = "restart-apiserver" // an API server on other etcd members than it should
	stepStopAPIServer  = "stop-apiserver"    // stop an API server beyond want (the last first)
	stepMarkRemoval    = "mark-removal"      // the last member beyond want is to be removed
	stepDone           = ""
)

// nextStep is the step a state takes toward want replicas, and the member
// it is about.
func nextStep(st *state, want int) (string, int) {
	n := len(st.Members)
	removing, adding, apiOff, stale, apiOn := -1, -1, -1, -1, -1
	target := st.apiEtcdServers()
	for i, m := range st.Members {
		switch m.Etcd {
		case etcdRemoving:
			removing = i
		case etcdAdding:
			adding = i
		}
		switch {
		case i < want && m.NoAPIServer && apiOff < 0:
			apiOff = i
		case i < want && !m.NoAPIServer && m.EtcdServers != target && stale < 0:
			stale = i
		case i >= want && !m.NoAPIServer:
			apiOn = i // the last one
		}
	}
	switch {
	case removing >= 0:
		return stepRemoveMember, removing
	case adding >= want:
		return stepAbortAdd, adding
	case adding >= 0:
		return stepAddMember, adding
	case n < want:
		return stepAppendMember, n
	case apiOff >= 0:
		return stepStartAPIServer, apiOff
	case stale >= 0:
		return stepRestartAPI, stale
	case apiOn >= 0:
		return stepStopAPIServer, apiOn
	case n > want:
		return stepMarkRemoval, n - 1
	}
	return stepDone, -1
}

// scaleStep takes the next step toward want and reports whether there was
// none left.
func (c *controlPlane) scaleStep(ctx context.Context, want int, wait time.Duration) (bool, error) {
	c.mu.Lock()
	step, i := nextStep(c.st, want)
	n := len(c.st.Members)
	progress := c.st.Progress
	c.mu.Unlock()
	switch step {
	case stepRemoveMember:
		return false, c.removeMember(ctx, i, wait)
	case stepAbortAdd:
		// A scale down while this member was being added: it goes.
		return false, c.update(func(st *state) { st.Members[i].Etcd = etcdRemoving },
			fmt.Sprintf("etcd member %d: its add stopped, removing it", i+1))
	case stepAddMember:
		return false, c.addMember(ctx, i, want, wait)
	case stepAppendMember:
		return false, c.appendMember()
	case stepStartAPIServer:
		return false, c.startAPIServer(ctx, i, want, wait)
	case stepRestartAPI:
		return false, c.restartAPIServer(ctx, i, want, wait)
	case stepStopAPIServer:
		return false, c.stopAPIServer(i, n)
	case stepMarkRemoval:
		return false, c.update(func(st *state) { st.Members[i].Etcd = etcdRemoving },
			fmt.Sprintf("removing etcd member %d of %d", i+1, n))
	}
	if progress != "" {
		return true, c.update(func(st *state) { st.Progress = "" }, "")
	}
	return true, nil
}

// update changes the state under the lock, sets its progress (unless ""),
// saves it and has the record written.
func (c *controlPlane) update(f func(*state), progress string) error {
	c.mu.Lock()
	f(c.st)
	if progress != "" {
		c.st.Progress = progress
	}
	err := c.l.save(c.st)
	c.mu.Unlock()
	if progress != "" {
		c.log.Info().Msg(progress)
	}
	c.wake()
	return err
}

// scaling reports whether the state is not the one its Replicas ask for
// (a scale is under way or stopped halfway), and where it stands.
func (st *state) scaling() (bool, string) {
	want := int(st.replicas())
	if step, _ := nextStep(st, want); step == stepDone {
		return false, ""
	}
	if st.Progress != "" {
		return true, st.Progress
	}
	return true, fmt.Sprintf("%d etcd member%s now", len(st.Members), plural(len(st.Members)))
}

// appendMember lays out the next member on fresh ports: to be added to
// etcd, no API server yet.
func (c *controlPlane) appendMember() error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	c.mu.Lock()
	version := c.st.Version
	c.mu.Unlock()
	return c.update(func(st *state) {
		st.Members = append(st.Members, member{EtcdClient: ports[0], EtcdPeer: ports[1], APIServer: ports[2], Version: version,
			Etcd: etcdAdding, Joined: true, NoAPIServer: true})
	}, "")
}

// addMember adds member i to etcd: member add --learner (unless the list
// has its peer URL already), its process started, promoted once in sync,
// healthy.
func (c *controlPlane) addMember(ctx context.Context, i, want int, wait time.Duration) error {
	c.mu.Lock()
	m := c.st.Members[i]
	var others []string
	for j, o := range c.st.Members {
		if j != i && o.Etcd == "" {
			others = append(others, url(o.EtcdClient))
		}
	}
	bin := c.bins[c.st.Version]
	c.mu.Unlock()
	of := fmt.Sprintf("etcd member %d of %d", i+1, want)
	if err := writeEtcdMemberPKI(c.l, i, c.now()); err != nil {
		return err
	}
	ctl, err := c.etcdctl(bin)
	if err != nil {
		return err
	}
	var em *etcdMember
	if err := poll(ctx, wait, "the etcd member list", func() error {
		list, err := ctl.memberList(ctx, others)
		em = list.byPeer(url(m.EtcdPeer))
		return err
	}); err != nil {
		return err
	}
	if em == nil {
		// Not a member: what a data dir holds is from an earlier try
		// and would not join.
		c.sup.Halt(etcdName(i))
		if err := os.RemoveAll(c.l.etcdData(i)); err != nil {
			return err
		}
		if err := poll(ctx, wait, "member add "+etcdName(i), func() error {
			_, err := ctl.run(ctx, others, "member", "add", etcdName(i), "--learner", "--peer-urls="+url(m.EtcdPeer))
			if err != nil {
				// The add may have been applied when the answer got lost.
				if list, lerr := ctl.memberList(ctx, others); lerr == nil && list.byPeer(url(m.EtcdPeer)) != nil {
					return nil
				}
			}
			return err
		}); err != nil {
			return err
		}
		if err := c.update(func(*state) {}, of+": added as a learner"); err != nil {
			return err
		}
		list, err := ctl.memberList(ctx, others)
		if err != nil {
			return err
		}
		if em = list.byPeer(url(m.EtcdPeer)); em == nil {
			return fmt.Errorf("%s: added, but not in the member list", etcdName(i))
		}
	}
	if !c.runs(etcdName(i)) {
		c.mu.Lock()
		p := c.etcd(i, bin)
		c.mu.Unlock()
		if err := c.sup.Start(p); err != nil {
			return err
		}
	}
	if em.IsLearner {
		// Promotion is refused until the learner has caught up.
		if err := poll(ctx, wait, "member promote "+etcdName(i), func() error {
			_, err := ctl.run(ctx, others, "member", "promote", em.hexID())
			if err != nil {
				// Promoted when the answer got lost?
				if list, lerr := ctl.memberList(ctx, others); lerr == nil {
					if now := list.byPeer(url(m.EtcdPeer)); now != nil && !now.IsLearner {
						return nil
					}
				}
			}
			return err
		}); err != nil {
			return err
		}
		if err := c.update(func(*state) {}, of+": promoted to a voting member"); err != nil {
			return err
		}
	}
	if err := poll(ctx, wait, etcdName(i)+" healthy", func() error {
		_, err := ctl.run(ctx, []string{url(m.EtcdClient)}, "endpoint", "health")
		return err
	}); err != nil {
		return err
	}
	return c.update(func(st *state) { st.Members[i].Etcd = "" }, of+" added")
}

// startAPIServer starts the API server beside member i and waits for its
// /readyz.
func (c *controlPlane) startAPIServer(ctx context.Context, i, want int, wait time.Duration) error {
	c.mu.Lock()
	c.st.Members[i].Version = c.st.Version
	p := c.apiserver(i, c.bins[c.st.Version])
	addr := c.st.apiAddr(i)
	err := c.l.save(c.st)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.sup.Halt(apiName(i)) // one a stop left behind
	if err := c.sup.Start(p); err != nil {
		return err
	}
	if err := c.waitReadyz(ctx, addr, apiName(i), wait); err != nil {
		return err
	}
	return c.update(func(st *state) { st.Members[i].NoAPIServer = false }, fmt.Sprintf("API server %d of %d started", i+1, want))
}

// restartAPIServer restarts API server i on the etcd members it should use
// (the endpoint passes connections to the others meanwhile).
func (c *controlPlane) restartAPIServer(ctx context.Context, i, want int, wait time.Duration) error {
	c.mu.Lock()
	c.setReady(i, false)
	bin := c.bins[c.st.Members[i].Version]
	if bin == "" {
		bin = c.bins[c.st.Version]
	}
	c.mu.Unlock()
	c.sup.Halt(apiName(i))
	c.mu.Lock()
	p := c.apiserver(i, bin)
	addr := c.st.apiAddr(i)
	servers := c.st.Members[i].EtcdServers
	c.mu.Unlock()
	if err := c.sup.Start(p); err != nil {
		return err
	}
	if err := c.waitReadyz(ctx, addr, apiName(i), wait); err != nil {
		return err
	}
	n := strings.Count(servers, ",") + 1
	return c.update(func(*state) {}, fmt.Sprintf("API server %d of %d restarted on %d etcd member%s", i+1, want, n, plural(n)))
}

// stopAPIServer stops the API server beside member i (of n): out of the
// endpoint's backends first.
func (c *controlPlane) stopAPIServer(i, n int) error {
	if err := c.update(func(st *state) { st.Members[i].NoAPIServer = true }, fmt.Sprintf("stopping API server %d of %d", i+1, n)); err != nil {
		return err
	}
	c.sup.Halt(apiName(i))
	return c.update(func(*state) {}, fmt.Sprintf("API server %d of %d stopped", i+1, n))
}

// removeMember removes member i (the last) from etcd: leadership moved to
// etcd-0 if it leads, member remove (retried while etcd finds it unsafe),
// its process stopped, its data dir and certificates deleted, and then it
// is dropped from the state.
func (c *controlPlane) removeMember(ctx context.Context, i int, wait time.Duration) error {
	c.mu.Lock()
	if i != len(c.st.Members)-1 || i == 0 {
		c.mu.Unlock()
		return fmt.Errorf("%s: only the last member but etcd-0 is removed", etcdName(i))
	}
	m := c.st.Members[i]
	var all, others []string
	for j, o := range c.st.Members {
		all = append(all, url(o.EtcdClient))
		if j != i {
			others = append(others, url(o.EtcdClient))
		}
	}
	first := c.st.Members[0]
	n := len(c.st.Members)
	bin := c.bins[c.st.Version]
	c.mu.Unlock()
	c.sup.Halt(apiName(i))
	ctl, err := c.etcdctl(bin)
	if err != nil {
		return err
	}
	var em, keep *etcdMember
	if err := poll(ctx, wait, "the etcd member list", func() error {
		list, err := ctl.memberList(ctx, others)
		em, keep = list.byPeer(url(m.EtcdPeer)), list.byPeer(url(first.EtcdPeer))
		if err == nil && keep == nil {
			err = errors.New("etcd-0 is not in the member list")
		}
		return err
	}); err != nil {
		return err
	}
	if em != nil {
		moved := false
		if err := poll(ctx, wait, "leadership away from "+etcdName(i), func() error {
			leader, err := ctl.leader(ctx, first)
			if err != nil || leader != em.ID {
				return err
			}
			moved = true
			_, err = ctl.run(ctx, all, "move-leader", keep.hexID())
			if err == nil {
				err = errors.New("moved; checking")
			}
			return err
		}); err != nil {
			return err
		}
		if moved {
			if err := c.update(func(*state) {}, fmt.Sprintf("etcd leadership moved from %s to %s", etcdName(i), etcdName(0))); err != nil {
				return err
			}
		}
		if err := poll(ctx, wait, "member remove "+etcdName(i), func() error {
			_, err := ctl.run(ctx, others, "member", "remove", em.hexID())
			if err != nil {
				if list, lerr := ctl.memberList(ctx, others); lerr == nil && list.byPeer(url(m.EtcdPeer)) == nil {
					return nil
				}
			}
			return err
		}); err != nil {
			return err
		}
	}
	c.sup.Halt(etcdName(i))
	if err := errors.Join(os.RemoveAll(c.l.etcdData(i)), removeEtcdMemberPKI(c.l, i)); err != nil {
		return err
	}
	c.mu.Lock()
	delete(c.ready, m.APIServer)
	c.mu.Unlock()
	return c.update(func(st *state) { st.Members = st.Members[:i] }, fmt.Sprintf("etcd member %d removed, %d left", i+1, n-1))
}

// runs reports whether the supervisor has a child called name.
func (c *controlPlane) runs(name string) bool {
	for _, s := range c.sup.Status() {
		if s.Name == name {
			return true
		}
	}
	return false
}

// waitReadyz waits for the API server at addr to answer /readyz.
func (c *controlPlane) waitReadyz(ctx context.Context, addr, name string, wait time.Duration) error {
	return poll(ctx, wait, name+" /readyz", func() error { return readyz(ctx, c.client, "https://"+addr) })
}

// poll calls f every 500 ms until it returns nil, ctx ends or wait has
// passed (then the last error, saying what was waited for).
func poll(ctx context.Context, wait time.Duration, what string, f func() error) error {
	deadline := time.Now().Add(wait)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not done within %s: %w", what, wait, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// etcdctl runs the etcdctl of the Kubernetes binaries (make kube builds
// it beside etcd) as the API servers' etcd client (the etcd CA's
// apiserver-etcd-client certificate), with nothing of the service's
// environment.
type etcdctl struct {
	path string
	l    layout
}

func (c *controlPlane) etcdctl(bin string) (*etcdctl, error) {
	path := filepath.Join(bin, "etcdctl")
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("kube-bin %s has no etcdctl: a replicas change needs it (make kube builds it)", bin)
	}
	return &etcdctl{path: path, l: c.l}, nil
}

func (e *etcdctl) run(ctx context.Context, endpoints []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	f := e.l.pkiFile
	full := append([]string{"--endpoints=" + strings.Join(endpoints, ","), "--dial-timeout=3s", "--command-timeout=10s",
		"--cacert=" + f("etcd/ca.crt"), "--cert=" + f("apiserver-etcd-client.crt"), "--key=" + f("apiserver-etcd-client.key")}, args...)
	cmd := exec.CommandContext(ctx, e.path, full...)
	cmd.Env = e.l.env()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if k := strings.LastIndex(msg, "\n"); k >= 0 {
			msg = msg[k+1:]
		}
		return out, fmt.Errorf("etcdctl %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// etcdMember is one entry of etcdctl -w json member list.
type etcdMember struct {
	ID         uint64   `json:"ID"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
	IsLearner  bool     `json:"isLearner"`
}

func (m *etcdMember) hexID() string { return strconv.FormatUint(m.ID, 16) }

type memberList struct {
	Members []etcdMember `json:"members"`
}

func (l *memberList) byPeer(peer string) *etcdMember {
	if l == nil {
		return nil
	}
	i := slices.IndexFunc(l.Members, func(m etcdMember) bool { return slices.Contains(m.PeerURLs, peer) })
	if i < 0 {
		return nil
	}
	return &l.Members[i]
}

func (e *etcdctl) memberList(ctx context.Context, endpoints []string) (*memberList, error) {
	out, err := e.run(ctx, endpoints, "-w", "json", "member", "list")
	if err != nil {
		return nil, err
	}
	var l memberList
	if err := json.Unmarshal(out, &l); err != nil {
		return nil, fmt.Errorf("etcdctl member list: %w", err)
	}
	return &l, nil
}

// leader is the ID of the leader as member m knows it.
func (e *etcdctl) leader(ctx context.Context, m member) (uint64, error) {
	out, err := e.run(ctx, []string{url(m.EtcdClient)}, "-w", "json", "endpoint", "status")
	if err != nil {
		return 0, err
	}
	var st []struct {
		Status struct {
			Leader uint64 `json:"leader"`
		} `json:"Status"`
	}
	if err := json.Unmarshal(out, &st); err != nil || len(st) == 0 || st[0].Status.Leader == 0 {
		return 0, fmt.Errorf("etcdctl endpoint status: no leader in %q (%v)", out, err)
	}
	return st[0].Status.Leader, nil
}
