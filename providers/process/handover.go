package process

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capn-dev/capn/providers/process/rehome"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Handing a cluster over between two deployments' process providers on
// one host (capn move). Each deployment has a state dir of its own; a
// moved cluster's machines keep running, so their processes keep every
// path they were started with. The adopting provider therefore:
//
//  1. checks the record's location (InfraMachine.location, the source's
//     machine directory) is really that machine: its machine.json names
//     the same cluster, machine, provider id and address, and its
//     capn-node runs as that machine (pid, start time, argv);
//  2. moves the cluster's directory into its own state dir (one rename,
//     on the same file system) and leaves a link at the old path, so the
//     running processes' paths still resolve; its records note the paths
//     the processes run with (machineRecord.NodeDir,
//     clusterRecord.EndpointStateDir) and adopted.json where it came from;
//  3. rehomes each running machine's agent to its own NATS (package
//     rehome: a connection file and SIGHUP) and waits until the agent
//     reports it logged in there: only then is the machine adopted, and
//     only then does the source let go of it.
//
// Anything else is refused (sdk.Permanent) with the reason: the restore
// records the machine as not adopted and capn move undoes the move. When
// the adopting deployment lets go of the cluster again (an undone move),
// the first orphan gives the directory back and points the agents back
// at their command line's NATS.

// adoptedFile (in an adopted cluster's directory) says where it came from.
const adoptedFile = "adopted.json"

// DefaultRehomeWait bounds how long an adopt waits for a machine's agent
// to log in at this provider's NATS (the agent itself tries for
// agent.RehomeTimeout, 30s).
const DefaultRehomeWait = 45 * time.Second

type adoptedRecord struct {
	From string    `json:"from"` // the cluster's directory in the source's state dir
	At   time.Time `json:"at"`
}

// Adopt takes machines and clusters over by their records. At start (the
// SDK hands over every record of this provider) they are in the state dir
// already: it logs what it finds. For an adopt command (a restore, a move)
// a record located in another state dir on this host is taken over as
// described above, or refused with why.
func (p *Provider) Adopt(ctx context.Context, machines []*capnv1.InfraMachine, clusters []*capnv1.InfraCluster) error {
	var errs []error
	for _, im := range machines {
		errs = append(errs, p.adoptMachine(ctx, im))
	}
	for _, ic := range clusters {
		errs = append(errs, p.adoptCluster(ic))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	p.envMu.Lock()
	atStart := p.reporter == nil
	p.envMu.Unlock()
	if atStart && len(machines) != 1 {
		recs, err := p.records()
		if err != nil {
			return err
		}
		running := 0
		for _, rec := range recs {
			if _, ok := p.running(rec); ok {
				running++
			}
		}
		p.log.Info().Int("observed", len(machines)).Int("on_disk", len(recs)).Int("running", running).Msg("machines read back from the state dir")
	}
	return nil
}

// adoptMachine takes over the machine of im.location, if that is in
// another state dir, and moves its agent to this provider's NATS.
func (p *Provider) adoptMachine(ctx context.Context, im *capnv1.InfraMachine) error {
	c, m, loc := im.GetCluster(), im.GetMachine(), im.GetLocation()
	if loc == "" || filepath.Clean(loc) == p.dirs.machine(c, m) {
		return nil // its own: Describe says whether it is there
	}
	src, err := sourceCluster(loc, c, m)
	if err != nil {
		return sdk.Permanent(err)
	}
	check := func(srcCluster string) error {
		src := layout{filepath.Dir(filepath.Dir(srcCluster))}
		rec := new(machineRecord)
		if err := readJSON(filepath.Join(src.machine(c, m), machineFile), rec); err != nil {
			return fmt.Errorf("no machine %s/%s at %s: %w", c, m, loc, err)
		}
		if err := sameMachine(rec, im); err != nil {
			return err
		}
		if exists(filepath.Join(src.machine(c, m), stoppedFile)) {
			return nil
		}
		if rec.NodeDir == "" {
			rec.NodeDir = src.nodeDir(c, m)
		}
		ref, ok := readRef(filepath.Join(src.machine(c, m), pidFile))
		if !ok || !alive(ref, p.identity(rec)) {
			return fmt.Errorf("the capn-node of %s/%s at %s does not run (neither running nor stopped by capn): nothing to adopt", c, m, loc)
		}
		if _, err := rehome.ReadConnected(rec.NodeDir); err != nil {
			return fmt.Errorf("the capn-node of %s/%s (pid %d) cannot be moved to another NATS without a restart (it reports no connection: %v); restart it (capn stop, capn start) before the move", c, m, ref.PID, err)
		}
		return nil
	}
	p.mu.Lock()
	err = p.takeCluster(c, src, check)
	p.mu.Unlock()
	if err != nil {
		return err
	}
	rec, err := p.record(c, m)
	if err != nil {
		return sdk.Permanent(fmt.Errorf("machine %s/%s: %w after its cluster was taken over", c, m, err))
	}
	if err := sameMachine(rec, im); err != nil {
		return sdk.Permanent(err)
	}
	if exists(p.stoppedPath(c, m)) {
		return nil // it connects here when started here
	}
	ref, ok := p.running(rec)
	if !ok {
		return sdk.Permanent(fmt.Errorf("the capn-node of %s/%s stopped during the adopt", c, m))
	}
	return p.rehomeNode(ctx, rec, ref)
}

// adoptCluster takes over the cluster directory of ic.location, if that is
// in another state dir; its endpoint keeps running.
func (p *Provider) adoptCluster(ic *capnv1.InfraCluster) error {
	c, loc := ic.GetCluster(), ic.GetLocation()
	if loc == "" || filepath.Clean(loc) == p.dirs.cluster(c) {
		return nil
	}
	if filepath.Base(filepath.Clean(loc)) != c {
		return sdk.Permanent(fmt.Errorf("location %q is not the directory of cluster %s", loc, c))
	}
	check := func(srcCluster string) error {
		rec := new(clusterRecord)
		if err := readJSON(filepath.Join(srcCluster, clusterFile), rec); err != nil {
			return fmt.Errorf("no cluster %s at %s: %w", c, loc, err)
		}
		if rec.Cluster != c || int32(rec.Port) != ic.GetControlPlaneEndpoint().GetPort() {
			return fmt.Errorf("the cluster at %s is another one (%s on port %d, the record says %s on port %d)",
				loc, rec.Cluster, rec.Port, c, ic.GetControlPlaneEndpoint().GetPort())
		}
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.takeCluster(c, filepath.Clean(loc), check)
}

// sourceCluster is the cluster directory of the machine directory loc:
// <state>/clusters/<c>/machines/<m>, an absolute path.
func sourceCluster(loc, c, m string) (string, error) {
	loc = filepath.Clean(loc)
	machines := filepath.Dir(loc)
	cluster := filepath.Dir(machines)
	if !filepath.IsAbs(loc) || filepath.Base(loc) != m || filepath.Base(machines) != machinesDir ||
		filepath.Base(cluster) != c || filepath.Base(filepath.Dir(cluster)) != clustersDir {
		return "", fmt.Errorf("location %q is not a process machine directory of %s/%s (<state dir>/clusters/%s/machines/%s)", loc, c, m, c, m)
	}
	return cluster, nil
}

// sameMachine checks rec is the machine im records.
func sameMachine(rec *machineRecord, im *capnv1.InfraMachine) error {
	addr := ""
	for _, a := range im.GetAddresses() {
		if a.GetType() == "InternalIP" {
			addr = a.GetAddress()
		}
	}
	switch {
	case rec.Cluster != im.GetCluster() || rec.Machine != im.GetMachine():
		return fmt.Errorf("the machine at %s is %s/%s, not %s/%s", im.GetLocation(), rec.Cluster, rec.Machine, im.GetCluster(), im.GetMachine())
	case rec.ProviderID != im.GetProviderId():
		return fmt.Errorf("the machine at %s has provider id %s, not %s", im.GetLocation(), rec.ProviderID, im.GetProviderId())
	case addr != "" && rec.Address != addr:
		return fmt.Errorf("the machine at %s has address %s, not %s", im.GetLocation(), rec.Address, addr)
	}
	return nil
}

// takeCluster moves the cluster directory src (another state dir's) into
// this state dir after check(src) passed, leaving a link at src; done
// before (the link is there) it only checks. p.mu must be held.
func (p *Provider) takeCluster(c, src string, check func(string) error) error {
	own := p.dirs.cluster(c)
	if filepath.Dir(filepath.Dir(src)) == filepath.Clean(p.opts.StateDir) {
		return nil
	}
	if fi, err := os.Lstat(own); err == nil {
		var ad adoptedRecord
		if fi.IsDir() && readJSON(filepath.Join(own, adoptedFile), &ad) == nil && ad.From == src {
			return nil // taken over by an earlier adopt
		}
		return sdk.Permanent(fmt.Errorf("this state dir (%s) already has a cluster %s: the one at %s cannot be moved in", p.opts.StateDir, c, src))
	}
	fi, err := os.Lstat(src)
	switch {
	case err != nil:
		return sdk.Permanent(fmt.Errorf("no cluster directory at %s: %w (the process provider hands machines over on one host only)", src, err))
	case fi.Mode()&fs.ModeSymlink != 0:
		to, _ := os.Readlink(src)
		return sdk.Permanent(fmt.Errorf("cluster %s at %s was handed over before (a link to %s)", c, src, to))
	case !fi.IsDir():
		return sdk.Permanent(fmt.Errorf("%s is not a directory", src))
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return sdk.Permanent(fmt.Errorf("%s belongs to uid %d, not to this provider's user (%d)", src, st.Uid, os.Getuid()))
	}
	if err := check(src); err != nil {
		return sdk.Permanent(err)
	}
	if err := os.MkdirAll(filepath.Dir(own), stateDirMode); err != nil {
		return err
	}
	var a, b syscall.Stat_t
	if syscall.Stat(filepath.Dir(src), &a) == nil && syscall.Stat(filepath.Dir(own), &b) == nil && a.Dev != b.Dev {
		return sdk.Permanent(fmt.Errorf("cannot move %s into %s: the two state dirs are on different file systems (put both deployments' data dirs on one)", src, p.opts.StateDir))
	}
	if err := moveLeavingLink(src, own); err != nil {
		return sdk.Permanent(fmt.Errorf("move %s into this state dir: %w", src, err))
	}
	// The processes keep the paths they were started with.
	srcDirs := layout{filepath.Dir(filepath.Dir(src))}
	names, _ := p.dirs.machineNames(c)
	for _, m := range names {
		rec, err := p.record(c, m)
		if err != nil || rec.NodeDir != "" {
			continue
		}
		rec.NodeDir = srcDirs.nodeDir(c, m)
		if err := writeJSON(p.machineJSON(c, m), rec); err != nil {
			return err
		}
	}
	crec := new(clusterRecord)
	if readJSON(filepath.Join(own, clusterFile), crec) == nil && crec.EndpointStateDir == "" {
		crec.EndpointStateDir = srcDirs.root
		if err := writeJSON(filepath.Join(own, clusterFile), crec); err != nil {
			return err
		}
	}
	if err := writeJSON(filepath.Join(own, adoptedFile), adoptedRecord{From: src, At: p.now().UTC()}); err != nil {
		return err
	}
	p.log.Info().Str("cluster", c).Str("from", src).Str("to", own).Msg("cluster directory taken over from another state dir; a link stays there")
	return nil
}

// connection is where this provider's machines connect.
func (p *Provider) connection() rehome.Connection {
	o := p.opts
	return rehome.Connection{URL: o.NodeNATSURL, CredsFile: o.NodeNATSCreds, NKeyFile: o.NodeNATSNKey,
		TLSCA: o.NodeNATSTLSCA, TLSCert: o.NodeNATSTLSCert, TLSKey: o.NodeNATSTLSKey, InboxPrefix: o.NodeNATSInboxPrefix}
}

// rehomeNode asks the machine's agent to move to this provider's NATS and
// waits until it reports it logged in there.
func (p *Provider) rehomeNode(ctx context.Context, rec *machineRecord, ref procRef) error {
	dir := p.dirs.nodeDir(rec.Cluster, rec.Machine)
	want := p.connection()
	if cur, err := rehome.ReadConnected(dir); err == nil && cur.URL == want.URL {
		return nil
	}
	if err := rehome.WriteConnection(dir, want); err != nil {
		return sdk.Permanent(fmt.Errorf("rehome %s/%s: %w", rec.Cluster, rec.Machine, err))
	}
	if err := syscall.Kill(ref.PID, syscall.SIGHUP); err != nil {
		_ = rehome.RemoveConnection(dir)
		return sdk.Permanent(fmt.Errorf("signal the capn-node of %s/%s (pid %d): %w", rec.Cluster, rec.Machine, ref.PID, err))
	}
	p.log.Info().Str("cluster", rec.Cluster).Str("machine", rec.Machine).Int("pid", ref.PID).Str("nats_url", want.URL).Msg("moving the machine's agent to this NATS")
	wait := p.opts.RehomeWait
	if wait <= 0 {
		wait = DefaultRehomeWait
	}
	ok, _ := until(wait, 50*time.Millisecond, ctx.Done(), func() bool {
		cur, err := rehome.ReadConnected(dir)
		return err == nil && cur.URL == want.URL
	})
	if !ok {
		_ = rehome.RemoveConnection(dir)
		return sdk.Permanent(fmt.Errorf("the capn-node of %s/%s did not log in at %s within %s (see %s); it stays with its old deployment",
			rec.Cluster, rec.Machine, want.URL, wait, filepath.Join(p.dirs.machine(rec.Cluster, rec.Machine), nodeLogFile)))
	}
	p.log.Info().Str("cluster", rec.Cluster).Str("machine", rec.Machine).Str("nats_url", want.URL).Msg("the machine's agent logged in at this NATS")
	return nil
}

var _ sdk.Orphaner = (*Provider)(nil)

// OrphanMachine lets go of a machine without touching it. A machine of
// this state dir's own is simply no longer recorded (it runs on, and is
// adopted back by its record). One of a cluster taken over from another
// state dir goes back there with its whole cluster: the first orphan gives
// the directory back and points every running agent at its command
// line's NATS (an undone move).
func (p *Provider) OrphanMachine(ctx context.Context, cluster, _ string) error {
	return p.giveBack(ctx, cluster)
}

// OrphanCluster lets go of a cluster's infrastructure without touching it
// (its endpoint runs on); one taken over from another state dir goes back
// there (see OrphanMachine).
func (p *Provider) OrphanCluster(ctx context.Context, cluster string) error {
	return p.giveBack(ctx, cluster)
}

// giveBack returns a cluster directory taken over from another state dir,
// if this one holds it.
func (p *Provider) giveBack(ctx context.Context, c string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	own := p.dirs.cluster(c)
	fi, err := os.Lstat(own)
	if err != nil || !fi.IsDir() {
		return nil // not here, or handed on (a link)
	}
	var ad adoptedRecord
	if readJSON(filepath.Join(own, adoptedFile), &ad) != nil {
		return nil // this state dir's own
	}
	if to, err := os.Readlink(ad.From); err != nil || to != own {
		return fmt.Errorf("cannot give cluster %s back: %s is no longer the link to %s (%v)", c, ad.From, own, err)
	}
	srcRoot := filepath.Dir(filepath.Dir(ad.From))
	srcDirs := layout{srcRoot}
	type agentRef struct {
		m, url string
		pid    int
	}
	var agents []agentRef
	names, _ := p.dirs.machineNames(c)
	for _, m := range names {
		rec, err := p.record(c, m)
		if err != nil {
			continue
		}
		runDir := rec.NodeDir
		if runDir == "" {
			runDir = p.dirs.nodeDir(c, m)
		}
		if rec.NodeDir == srcDirs.nodeDir(c, m) {
			rec.NodeDir = ""
			if err := writeJSON(p.machineJSON(c, m), rec); err != nil {
				return err
			}
		}
		if err := rehome.RemoveConnection(p.dirs.nodeDir(c, m)); err != nil {
			return err
		}
		ref, ok := readRef(p.pidPath(c, m))
		if !ok || !alive(ref, p.identity(&machineRecord{Cluster: c, Machine: m, NodeDir: runDir})) {
			continue
		}
		args, _ := cmdline(ref.PID)
		url := ""
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--nats-url="); ok {
				url = v
			}
		}
		agents = append(agents, agentRef{m: m, url: url, pid: ref.PID})
	}
	crec := new(clusterRecord)
	if readJSON(filepath.Join(own, clusterFile), crec) == nil && crec.EndpointStateDir == srcRoot {
		crec.EndpointStateDir = ""
		if err := writeJSON(filepath.Join(own, clusterFile), crec); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(own, adoptedFile)); err != nil {
		return err
	}
	if err := moveBack(ad.From, own); err != nil {
		return fmt.Errorf("give cluster %s back to %s: %w", c, ad.From, err)
	}
	p.log.Info().Str("cluster", c).Str("to", ad.From).Msg("cluster directory given back to the state dir it came from")
	// The agents go back to their command line's NATS; their provider
	// there answers for them again whether or not they did so yet.
	for _, a := range agents {
		_ = syscall.Kill(a.pid, syscall.SIGHUP)
	}
	ok, _ := until(DefaultRehomeWait, 50*time.Millisecond, ctx.Done(), func() bool {
		for _, a := range agents {
			if cur, err := rehome.ReadConnected(srcDirs.nodeDir(c, a.m)); err != nil || cur.URL != a.url {
				return false
			}
		}
		return true
	})
	if !ok {
		p.log.Warn().Str("cluster", c).Msg("not every agent reported it went back to its old NATS")
	}
	return nil
}

// moveLeavingLink moves the directory from to to (one file system) and
// leaves a link to it at from. At no instant is from missing or another
// directory (a process writing under it would make one): a link is
// swapped in for it (renameat2 RENAME_EXCHANGE) before the directory,
// now at the link's temporary name, is renamed to to.
func moveLeavingLink(from, to string) error {
	tmp := filepath.Join(filepath.Dir(from), ".handover-"+filepath.Base(from))
	_ = os.Remove(tmp)
	if err := os.Symlink(to, tmp); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, from, unix.RENAME_EXCHANGE); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, to); err != nil {
		_ = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, from, unix.RENAME_EXCHANGE)
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// moveBack undoes moveLeavingLink: the directory own goes back to from,
// swapped in for the link there.
func moveBack(from, own string) error {
	tmp := filepath.Join(filepath.Dir(from), ".handover-"+filepath.Base(from))
	_ = os.Remove(tmp)
	if err := os.Rename(own, tmp); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, from, unix.RENAME_EXCHANGE); err != nil {
		_ = os.Rename(tmp, own)
		return err
	}
	return os.Remove(tmp)
}
