package realnode

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Files of a node's directory.
const (
	HolderPIDFile   = "holder.pid" // the process that holds the node's mounts
	ContainerdDir   = "containerd" // containerd's root, state, opt, socket
	CNIConfDir      = "cni-conf"   // the CNI config containerd renders
	CNIIPAMDir      = "cni-ipam"   // host-local's state
	ContainerdLog   = "containerd.log"
	KubeletLog      = "kubelet.log"
	containerIDFile = "container-ids" // the CRI's containers, for their cgroups
)

// Socket is the node's containerd socket.
func (n *Node) Socket() string { return filepath.Join(n.Dir, ContainerdDir, "containerd.sock") }

// CNIConf is the directory containerd renders the node's CNI config into.
func (n *Node) CNIConf() string { return filepath.Join(n.Dir, CNIConfDir) }

// Boot is what StartServices runs on a node.
type Boot struct {
	Stack    Stack
	Images   []Image
	CapnNode string // the capn-node binary (its kubelet unit)
	Hostname string // the node's name (/etc/hosts)
	// Env is the environment of containerd and the kubelet unit (PATH
	// with the stack first).
	Env []string
	// ProviderID, when set, is the kubelet's --provider-id: the Node
	// registers with it as spec.providerID, by which capn matches a Node
	// to its machine (the health-watcher reads its conditions, drains and
	// deletes it). It is the machine's own KUBELET_EXTRA_ARGS in the
	// node's /etc/default/kubelet, written before the kubelet unit starts,
	// as a cloud's instance data hands a kubelet its provider id.
	ProviderID string
}

// KubeletDefaults is the node's /etc/default/kubelet for a provider id.
func KubeletDefaults(providerID string) string {
	return "# written by capn's process provider: the machine's provider id\nKUBELET_EXTRA_ARGS='--provider-id=" + providerID + "'\n"
}

// writeKubeletDefaults writes /etc/default/kubelet in the node's mounts
// (through its holder's root) unless it already says that; a provider id
// with a quote or whitespace is refused (the unit splits the value at
// whitespace).
func (n *Node) writeKubeletDefaults(providerID string) error {
	if strings.ContainsAny(providerID, "'\"\\ \t\n") {
		return fmt.Errorf("provider id %q: a quote, backslash or whitespace cannot be a kubelet argument", providerID)
	}
	if n.Root == "" {
		return errors.New("the node has no mounts of its own to write /etc/default/kubelet in")
	}
	path := filepath.Join(n.Root, "etc", "default", "kubelet")
	want := KubeletDefaults(providerID)
	if b, err := os.ReadFile(path); err == nil && string(b) == want {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".capn-tmp"
	if err := os.WriteFile(tmp, []byte(want), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Path is the PATH a node's processes get: the kube binaries, the stack,
// then the usual system directories.
func (s Stack) Path() string {
	return "PATH=" + s.KubeBin + ":" + s.Bin + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
}

// detached starts args (through nsenter) in a session of its own, with
// output appended to logPath, and reaps it when it exits.
func detached(env []string, logPath string, args ...string) (*exec.Cmd, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command("nsenter", args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait() }()
	return cmd, nil
}

// holderArgs is the holder's command line once its script exec'd.
var holderArgs = []string{"sleep", "infinity"}

// Holder is the pid of the process that holds the node's mounts, if it
// runs: recorded in the node's directory, in the node's network
// namespace, and sleep infinity.
func (n *Node) Holder() (int, bool) {
	b, err := os.ReadFile(filepath.Join(n.Dir, HolderPIDFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || string(cmdline) != strings.Join(holderArgs, "\x00")+"\x00" {
		return 0, false
	}
	var a, b2 syscall.Stat_t
	if syscall.Stat("/run/netns/"+n.NS, &a) != nil || syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &b2) != nil || a.Ino != b2.Ino {
		return 0, false
	}
	return pid, true
}

// StartServices gives the node its own mounts (a holder process, detached:
// the node outlives its caller), then its containerd (CRI on, the CNI
// config rendered from the pod CIDR, every image imported) and the
// kubelet unit (capn-node kubelet), which starts the kubelet once kubeadm
// wrote its configuration. Each step that already runs is kept: it is
// idempotent.
func (n *Node) StartServices(b Boot) error {
	if pid, ok := n.Holder(); ok {
		n.SetHolder(pid)
	} else {
		if err := os.MkdirAll(n.Dir, 0o700); err != nil {
			return err
		}
		args, env := n.MountCommand(n.Socket(), b.Hostname, holderArgs...)
		cmd := exec.Command("nsenter", args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			return err
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "ready\n" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("the node's mount namespace was not set up: %q %v: %s", line, err, stderr.String())
		}
		go func() { _ = cmd.Wait() }()
		if err := os.WriteFile(filepath.Join(n.Dir, HolderPIDFile), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
			return err
		}
		n.SetHolder(cmd.Process.Pid)
	}

	pause := PauseImage(b.Images)
	if pause == "" {
		return fmt.Errorf("no pause image among %d images", len(b.Images))
	}
	dir := filepath.Join(n.Dir, ContainerdDir)
	for _, d := range []string{"root", "state", "opt", "../" + CNIConfDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return err
		}
	}
	if _, err := b.Stack.Ctr(n.Socket(), "k8s.io", nil, "version"); err != nil {
		tmpl := filepath.Join(n.Dir, "cni.conflist.tmpl")
		if err := os.WriteFile(tmpl, []byte(fmt.Sprintf(CNITemplate, filepath.Join(n.Dir, CNIIPAMDir))), 0o600); err != nil {
			return err
		}
		cfg := filepath.Join(dir, "config.toml")
		conf := ContainerdConfig(dir, n.Socket(), b.Stack, &CRI{PauseImage: pause, CNIConfDir: n.CNIConf(), CNIConfTemplate: tmpl})
		if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
			return err
		}
		if _, err := detached(b.Env, filepath.Join(n.Dir, ContainerdLog), n.InNode(filepath.Join(b.Stack.Bin, "containerd"), "--config", cfg, "--log-level", "info")...); err != nil {
			return err
		}
		if err := poll(90*time.Second, func() error {
			_, err := b.Stack.Ctr(n.Socket(), "k8s.io", nil, "version")
			return err
		}); err != nil {
			return fmt.Errorf("containerd of %s does not answer: %w\n%s", n.NS, err, tailFile(filepath.Join(n.Dir, ContainerdLog), 20))
		}
	}
	listed, err := b.Stack.Ctr(n.Socket(), "k8s.io", nil, "images", "ls", "-q")
	if err != nil {
		return err
	}
	for _, im := range b.Images {
		if strings.Contains(listed, im.Ref+"\n") {
			continue
		}
		if _, err := b.Stack.Ctr(n.Socket(), "k8s.io", nil, "images", "import", "--snapshotter", "overlayfs", im.Archive); err != nil {
			return err
		}
	}
	if b.ProviderID != "" {
		if err := n.writeKubeletDefaults(b.ProviderID); err != nil {
			return err
		}
	}
	if !n.runs("kubelet", "--kubelet") {
		if _, err := detached(b.Env, filepath.Join(n.Dir, KubeletLog), n.InNode(b.CapnNode, "kubelet", "--kubelet", filepath.Join(b.Stack.KubeBin, "kubelet"), "--restart-sec", "2s")...); err != nil {
			return err
		}
	}
	return nil
}

// runs reports whether a process in the node's network namespace has
// args among its arguments.
func (n *Node) runs(args ...string) bool {
	for _, pid := range Processes(n.NS) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(b), "\x00"+strings.Join(args, "\x00")+"\x00") {
			return true
		}
	}
	return false
}

// Remove removes everything of the node from the host: every process in
// it (the kubelet and its unit, containerd, the shims, the containers,
// the agent, the holder of its mounts: with the last, its mount namespace
// and every mount in it go), the cgroups of its containers, its network
// namespace and switch port, the host's routes to its pods, and its
// directory. What is already gone is fine: Remove is idempotent, and
// Leftovers says what it could not remove.
func (n *Node) Remove(s Stack) error {
	var errs []error
	if n.Exists() {
		if out, err := s.Ctr(n.Socket(), "k8s.io", nil, "containers", "ls", "-q"); err == nil {
			_ = os.WriteFile(filepath.Join(n.Dir, containerIDFile), []byte(out), 0o600)
		}
		for round := 0; round < 20; round++ {
			procs := Processes(n.NS)
			if len(procs) == 0 {
				break
			}
			for _, pid := range procs {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			_ = poll(5*time.Second, func() error {
				for _, pid := range procs {
					if alive(pid) {
						return fmt.Errorf("pid %d still runs", pid)
					}
				}
				return nil
			})
		}
		if p := Processes(n.NS); len(p) > 0 {
			errs = append(errs, fmt.Errorf("%d processes of %s did not stop: %v", len(p), n.NS, p))
		}
	}
	if ids := n.containerIDs(); len(ids) > 0 {
		errs = append(errs, removeCgroups(ids))
	}
	if n.lan != nil {
		errs = append(errs, n.lan.UnroutePods(n.NodeIP, nil))
	}
	errs = append(errs, n.removeNetwork())
	errs = append(errs, unmountUnder(n.Dir))
	if err := os.RemoveAll(n.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// containerIDs are the node's containers, whose cgroups Remove removes:
// those its containerd listed (containerIDFile, written by Remove while
// containerd answered) and those runc holds state of in the node's runc
// root (ContainerdConfig's Root, <dir>/containerd/runc/k8s.io/<id>): a
// node whose processes were all killed out of band has no containerd to
// ask, but runc's state of each container it ran is still there.
func (n *Node) containerIDs() []string {
	seen := map[string]bool{}
	var ids []string
	add := func(id string) {
		if id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if b, err := os.ReadFile(filepath.Join(n.Dir, containerIDFile)); err == nil {
		for _, id := range strings.Fields(string(b)) {
			add(id)
		}
	}
	if entries, err := os.ReadDir(filepath.Join(n.Dir, ContainerdDir, "runc", "k8s.io")); err == nil {
		for _, e := range entries {
			if e.IsDir() {
				add(e.Name())
			}
		}
	}
	return ids
}

// Leftovers lists what of the node is still on the host.
func (n *Node) Leftovers() []string {
	var out []string
	if n.Exists() {
		out = append(out, "network namespace "+n.NS)
		if p := Processes(n.NS); len(p) > 0 {
			out = append(out, fmt.Sprintf("%d processes in %s", len(p), n.NS))
		}
	}
	if exists(n.Dir) {
		out = append(out, "directory "+n.Dir)
	}
	if m := mountsUnder(n.Dir); len(m) > 0 {
		out = append(out, "mounts "+strings.Join(m, ", "))
	}
	if r, _ := Run(nil, nil, "ip", "-4", "route", "show", "via", n.NodeIP); strings.TrimSpace(r) != "" {
		out = append(out, "host routes via "+n.NodeIP+": "+strings.TrimSpace(r))
	}
	if n.lan != nil && exists("/run/netns/"+n.lan.NS) {
		sw, _ := n.veths()
		if r, _ := Run(nil, nil, "ip", "-n", n.lan.NS, "-o", "link", "show", sw); strings.TrimSpace(r) != "" {
			out = append(out, "switch port "+sw)
		}
	}
	return out
}

// removeCgroups removes the cgroup v1 directories /k8s.io/<id> of the
// node's containers in every hierarchy (the CRI's parent when the kubelet
// runs without its QoS hierarchy), and /k8s.io once empty. A cgroup whose
// last killed process is still exiting is busy (EBUSY) for a moment: it
// is tried again for up to 10 s — a cgroup given up on would be left on
// the host, since Remove then removes the list of ids with the node's
// directory.
func removeCgroups(ids []string) error {
	var errs []error
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		for _, id := range ids {
			path := filepath.Join(h, "k8s.io", id)
			err := poll(10*time.Second, func() error {
				if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
					return err
				}
				return nil
			})
			if err != nil {
				errs = append(errs, err)
			}
		}
		_ = os.Remove(filepath.Join(h, "k8s.io")) // only when empty: other nodes' containers stay
	}
	return errors.Join(errs...)
}

func mountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var mounts []string
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	return mounts
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if j := strings.LastIndexByte(s, ')'); j > 0 {
		if f := strings.Fields(s[j+1:]); len(f) > 0 && f[0] == "Z" {
			return false
		}
	}
	return true
}

func poll(d time.Duration, check func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tailFile(path string, lines int) string {
	b, _ := os.ReadFile(path)
	l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
