package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The state directory is the provider's whole memory; a restarted provider
// reads it back (there is nothing else to adopt):
//
//	<state>/clusters/<c>/cluster.json            the cluster's infrastructure (EnsureCluster)
//	<state>/clusters/<c>/endpoint.pid, .log      its endpoint process (load balancer)
//	<state>/clusters/<c>/machines/<m>/machine.json   identity: provider id, role, address, version, checksum
//	<state>/clusters/<c>/machines/<m>/pid        "<pid> <start time>" of its capn-node
//	<state>/clusters/<c>/machines/<m>/stopped    present while stopped by capn
//	<state>/clusters/<c>/machines/<m>/node/      capn-node's --data-dir (the machine's disk)
//	<state>/clusters/<c>/machines/<m>/node.log   capn-node's output
const (
	clustersDir = "clusters"
	machinesDir = "machines"
	clusterFile = "cluster.json"
	endpointPID = "endpoint.pid"
	endpointLog = "endpoint.log"
	machineFile = "machine.json"
	// credentialFile holds the machine's bootstrap credential (0600),
	// which its capn-node reads with --bootstrap-credential-file.
	credentialFile = "bootstrap-credential"
	pidFile        = "pid"
	stoppedFile    = "stopped"
	nodeDataDir    = "node"
	nodeLogFile    = "node.log"
	stateDirMode   = 0o750
)

// machineRecord is machine.json: what makes the machine itself, kept
// across stop, start, reboot and provider restarts.
type machineRecord struct {
	Cluster    string `json:"cluster"`
	Machine    string `json:"machine"`
	ProviderID string `json:"provider_id"`
	// Role is CreateMachine.role (control-plane or worker): the cluster
	// endpoint's backends are its control-plane machines. Records written
	// before roles were kept have none, and are no backend.
	Role    string `json:"role,omitempty"`
	Address string `json:"address"`
	Version string `json:"version"`
	// Bootstrap is CreateMachine.bootstrap_provider: a kube-local
	// machine must run binaries of its version (records written before
	// it was kept have none).
	Bootstrap  string `json:"bootstrap_provider,omitempty"`
	Checksum   string `json:"bootstrap_checksum"`
	CACertHash string `json:"ca_cert_hash,omitempty"`
	Failure    string `json:"failure_domain,omitempty"`
	// Capacity is its Node's capacity, from the template parameters cpu,
	// memory and pods (nodecapacity's String; records written before it
	// was kept have none: kwok's defaults).
	Capacity string `json:"capacity,omitempty"`
	// NodeDir is the --data-dir its running capn-node was started with
	// when that is not this state dir's (a machine adopted from another
	// state dir keeps the paths it was started with, through the link
	// left there); empty otherwise, and cleared when it starts here.
	NodeDir string `json:"node_dir,omitempty"`
	// RealNode is the machine's node index on the switch in node mode
	// (its namespace capn-node-<lan>-<index>, its directory
	// realnodes/<index>); 0 otherwise.
	RealNode int       `json:"real_node,omitempty"`
	Created  time.Time `json:"created"`
	// Changed is when the machine last started or stopped: the updated
	// time of its observed record.
	Changed time.Time `json:"changed"`
}

// clusterRecord is cluster.json.
type clusterRecord struct {
	Cluster string `json:"cluster"`
	Port    int    `json:"port"`
	// EndpointStateDir is the --process-state-dir its running endpoint
	// was started with when that is not this state dir (a cluster adopted
	// from another state dir: its endpoint reads its machines through the
	// link left there); empty otherwise, and cleared when it starts here.
	EndpointStateDir string    `json:"endpoint_state_dir,omitempty"`
	Created          time.Time `json:"created"`
}

// layout resolves paths in the state directory.
type layout struct{ root string }

func (l layout) cluster(c string) string    { return filepath.Join(l.root, clustersDir, c) }
func (l layout) machines(c string) string   { return filepath.Join(l.cluster(c), machinesDir) }
func (l layout) machine(c, m string) string { return filepath.Join(l.machines(c), m) }
func (l layout) nodeDir(c, m string) string { return filepath.Join(l.machine(c, m), nodeDataDir) }

// clusterNames lists the clusters that have a directory.
func (l layout) clusterNames() ([]string, error) { return dirNames(filepath.Join(l.root, clustersDir)) }

// machineNames lists the machines of cluster c that have a directory.
func (l layout) machineNames(c string) ([]string, error) { return dirNames(l.machines(c)) }

func dirNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeJSON writes v atomically.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, append(b, '\n'))
}

func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), stateDirMode); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func readRef(path string) (procRef, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procRef{}, false
	}
	r, err := parseRef(string(b))
	return r, err == nil
}

// removeIfEmpty removes dir and then its parents up to (not including)
// stop while they are empty.
func removeIfEmpty(dir, stop string) {
	for dir != stop && strings.HasPrefix(dir, stop) {
		if err := os.Remove(dir); err != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}

const (
	// RoleControlPlane is CreateMachine.role of a control-plane machine.
	RoleControlPlane = "control-plane"
	// DefaultAPIServerPort is where a control-plane machine's
	// kube-apiserver listens on the machine's own address: the port of
	// the cluster endpoint's backends.
	DefaultAPIServerPort = 6443
)

// ControlPlaneAddresses are the addresses of cluster's control-plane
// machines recorded in the process provider's state dir, sorted by machine
// name: the backends of the cluster's endpoint (capn-node endpoint
// --process-state-dir), whatever their state — the endpoint's health
// checks tell which answer. A cluster without machines has none.
func ControlPlaneAddresses(stateDir, cluster string) ([]string, error) {
	dirs := layout{stateDir}
	names, err := dirs.machineNames(cluster)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range names {
		rec := new(machineRecord)
		switch err := readJSON(filepath.Join(dirs.machine(cluster, m), machineFile), rec); {
		case errors.Is(err, fs.ErrNotExist):
			continue // being created or deleted
		case err != nil:
			return nil, err
		}
		if rec.Role == RoleControlPlane && rec.Address != "" {
			out = append(out, rec.Address)
		}
	}
	return out, nil
}
