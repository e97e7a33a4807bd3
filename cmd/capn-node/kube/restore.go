package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// etcd restore, on every control-plane machine of the cluster at once, as
// etcd's disaster recovery says (etcd.io, "Restoring a cluster"), driven
// by the backup service through the node agent:
//
//	StageRestore   the snapshot is written to <data>/capn-node/etcd-restore/<id>.db
//	PrepareRestore its size and sha256 checked ─► every child stopped (kwok,
//	               scheduler, controller-manager, API server, etcd) ─►
//	               etcdutl snapshot restore into <etcd data>.restore-<id>
//	               (this member's name and peer URL, the initial cluster of
//	               every member, a new cluster token, the revision bumped
//	               and marked compacted: Kubernetes' watch caches see a
//	               revision that only grows)
//	StartRestored  (once every member is prepared) the old data dir moved
//	               to <etcd data>.pre-restore-<id>, the restored one in its
//	               place ─► every child started again ─► once the API
//	               server is ready, the Node registered again (a snapshot
//	               older than the Node does not hold it)
//	AbortRestore   the restore's files dropped; the children started again
//	               if they were stopped and the data dir was not swapped
//
// The membership loop (manageMembers) skips its passes from prepare until
// the Node is registered again: a restored cluster's members have new IDs
// and its Nodes may be older than the machines.

// restoreIDPattern is what a restore id may be: it names files.
var restoreIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// RestoreBumpRevision is how far a restore bumps etcd's revision
// (etcdutl --bump-revision), as Kubernetes' docs advise: past any
// revision a watch cache or client has seen.
const RestoreBumpRevision = 1_000_000_000

// RestoreDir is where a restore's files are.
func (r *Runtime) RestoreDir() string {
	return filepath.Join(r.opts.DataDir, "capn-node", "etcd-restore")
}

func (r *Runtime) restoreFile(id string) string { return filepath.Join(r.RestoreDir(), id+".db") }
func (r *Runtime) restoredDir(id string) string { return r.layout.EtcdDataDir() + ".restore-" + id }
func (r *Runtime) asideDir(id string) string    { return r.layout.EtcdDataDir() + ".pre-restore-" + id }

func checkRestoreID(id string) error {
	if !restoreIDPattern.MatchString(id) {
		return fmt.Errorf("restore id %q: want 1 to 63 lowercase letters, digits and dashes", id)
	}
	return nil
}

// EtcdSelf is this machine's etcd member as the restore names it: its
// name and peer URL.
func (r *Runtime) EtcdSelf() Member {
	return Member{Name: r.cfg.NodeName, PeerURLs: []string{url("https", netip.MustParseAddr(r.opts.Address), r.opts.Ports.EtcdPeer)}}
}

// EtcdSnapshot takes a snapshot of this machine's member into w.
func (r *Runtime) EtcdSnapshot(ctx context.Context, w io.Writer) (SnapshotInfo, error) {
	if !r.cfg.IsControlPlane() {
		return SnapshotInfo{}, errors.New("this machine runs no etcd (a worker)")
	}
	if r.restoring.Load() {
		return SnapshotInfo{}, errors.New("an etcd restore is under way on this machine")
	}
	etcd, err := NewEtcdFromPKI(r.layout, []string{url("https", netip.MustParseAddr(r.opts.Address), r.opts.Ports.EtcdClient)})
	if err != nil {
		return SnapshotInfo{}, err
	}
	defer etcd.Close()
	return etcd.Snapshot(ctx, w)
}

// StageRestore writes data at offset of restore id's file (offset 0
// starts it anew).
func (r *Runtime) StageRestore(id string, offset int64, data []byte) (int64, error) {
	if err := checkRestoreID(id); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(r.RestoreDir(), 0o700); err != nil {
		return 0, err
	}
	flags := os.O_WRONLY | os.O_CREATE
	if offset == 0 {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(r.restoreFile(id), flags, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Size() != offset {
		return st.Size(), fmt.Errorf("restore %s: chunk at offset %d, but the file holds %d bytes", id, offset, st.Size())
	}
	if _, err := f.WriteAt(data, offset); err != nil {
		return 0, err
	}
	return offset + int64(len(data)), f.Sync()
}

// PrepareRestore checks restore id's file, stops the control plane and
// restores the file into a fresh data dir with this member's name and
// peer URL, initialCluster (name=peerURL,…, every member) and token. It
// is idempotent: a restored dir of the same id is made again.
func (r *Runtime) PrepareRestore(ctx context.Context, id string, size int64, sum, initialCluster, token string) error {
	if err := checkRestoreID(id); err != nil {
		return err
	}
	if !r.cfg.IsControlPlane() {
		return errors.New("this machine runs no etcd (a worker)")
	}
	self := r.EtcdSelf()
	if !strings.Contains(","+initialCluster+",", ","+self.Name+"="+self.PeerURLs[0]+",") {
		return fmt.Errorf("initial cluster %q does not hold this member %s=%s", initialCluster, self.Name, self.PeerURLs[0])
	}
	if token == "" {
		return errors.New("no cluster token")
	}
	etcdutl := filepath.Join(r.opts.BinDir, "etcdutl")
	if _, err := os.Stat(etcdutl); err != nil {
		return fmt.Errorf("etcdutl is not in the bin dir %s (hack/kube.sh builds it): %w", r.opts.BinDir, err)
	}
	got, n, err := fileSHA256(r.restoreFile(id))
	if err != nil {
		return err
	}
	if n != size || got != sum {
		return fmt.Errorf("restore %s: the file holds %d bytes with sha256 %s, want %d bytes with %s", id, n, got, size, sum)
	}
	r.restoring.Store(true)
	r.ready.Store(false)
	r.setCondition(Condition{Status: "Unknown", Reason: "RestoringEtcd", Message: "kube-local: restoring etcd (restore " + id + "): the control plane is stopped"})
	r.opts.Log.Warn().Str("restore", id).Msg("stopping the control plane to restore etcd")
	r.haltForRestore()
	dir := r.restoredDir(id)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, etcdutl, "snapshot", "restore", r.restoreFile(id),
		"--name="+self.Name, "--initial-cluster="+initialCluster, "--initial-cluster-token="+token,
		"--initial-advertise-peer-urls="+self.PeerURLs[0], "--data-dir="+dir,
		fmt.Sprintf("--bump-revision=%d", RestoreBumpRevision), "--mark-compacted")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("etcdutl snapshot restore: %v: %s", err, tail(string(out), 5))
	}
	r.opts.Log.Info().Str("restore", id).Str("data_dir", dir).Msg("etcd snapshot restored into a fresh data dir")
	return nil
}

// haltForRestore stops every child once; the processes are kept to be
// started again.
func (r *Runtime) haltForRestore() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.halted == nil {
		r.halted = r.sup.Halt()
	}
}

// StartRestored swaps the restored data dir in and starts the control
// plane again. Once the API server is ready this machine's Node is
// registered again and the membership loop resumes (in the background).
func (r *Runtime) StartRestored(ctx context.Context, id string) error {
	if err := checkRestoreID(id); err != nil {
		return err
	}
	data, fresh := r.layout.EtcdDataDir(), r.restoredDir(id)
	if _, err := os.Stat(fresh); err == nil {
		if err := os.RemoveAll(r.asideDir(id)); err != nil {
			return err
		}
		if err := os.Rename(data, r.asideDir(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("move the old etcd data aside: %w", err)
		}
		if err := os.Rename(fresh, data); err != nil {
			return fmt.Errorf("move the restored etcd data in: %w", err)
		}
	} else if _, err := os.Stat(r.asideDir(id)); err != nil {
		return fmt.Errorf("restore %s is not prepared on this machine (no %s)", id, fresh)
	}
	if err := r.startHalted(); err != nil {
		return err
	}
	_ = os.Remove(r.restoreFile(id))
	r.opts.Log.Info().Str("restore", id).Msg("control plane started on the restored etcd data")
	go r.afterRestore(ctx, id)
	return nil
}

// AbortRestore drops restore id's files and starts the control plane
// again if it was stopped (on the old data: nothing was swapped).
func (r *Runtime) AbortRestore(id string) error {
	if err := checkRestoreID(id); err != nil {
		return err
	}
	_ = os.Remove(r.restoreFile(id))
	if err := os.RemoveAll(r.restoredDir(id)); err != nil {
		return err
	}
	if err := r.startHalted(); err != nil {
		return err
	}
	r.restoring.Store(false)
	return nil
}

func (r *Runtime) startHalted() error {
	r.mu.Lock()
	halted := r.halted
	r.halted = nil
	r.mu.Unlock()
	for _, p := range halted {
		if err := r.sup.Start(p); err != nil {
			return fmt.Errorf("start %s: %w", p.Name, err)
		}
	}
	return nil
}

// afterRestore registers the Node again once the API server answers, then
// lets the membership loop resume.
func (r *Runtime) afterRestore(ctx context.Context, id string) {
	r.mu.Lock()
	c := r.client
	r.mu.Unlock()
	if c == nil {
		r.restoring.Store(false)
		return
	}
	if !r.waitReady(ctx) {
		return
	}
	if r.retry(ctx, "register the Node after the etcd restore", func() error { return RegisterNode(ctx, c, r.node()) }) {
		r.opts.Log.Info().Str("restore", id).Msg("Node registered again after the etcd restore")
		r.restoring.Store(false)
	}
}

// Restoring is true from a restore's prepare until its Node is registered
// again.
func (r *Runtime) Restoring() bool { return r.restoring.Load() }

// EtcdHealth is this machine's member's health (nil: healthy).
func (r *Runtime) EtcdHealth(ctx context.Context) error {
	local := url("https", netip.MustParseAddr(r.opts.Address), r.opts.Ports.EtcdClient)
	etcd, err := NewEtcdFromPKI(r.layout, []string{local})
	if err != nil {
		return err
	}
	defer etcd.Close()
	return etcd.MemberHealth(ctx, Member{ClientURLs: []string{local}})
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
