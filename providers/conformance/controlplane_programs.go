package conformance

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// StartHosted runs the controlplane-hosted program (built from capn's
// module, or from $CAPN_CONFORMANCE_BIN_DIR) with --kube-bin kubeBin (a
// colon-separated list, one directory per version) on natsURL until the
// test ends, and returns its data directory: <dir>/<cluster> holds a
// hosted control plane's state, PKI, etcd data and logs.
func StartHosted(t *testing.T, natsURL, kubeBin string) string {
	t.Helper()
	progs := programDir(t, "controlplane-hosted")
	dataDir := filepath.Join(t.TempDir(), "hosted")
	StartProgram(t, filepath.Join(progs, "controlplane-hosted"), []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json"},
		"--nats-url="+natsURL, "--http-addr=off", "--hosted-data-dir="+dataDir, "--kube-bin="+kubeBin)
	return dataDir
}

// StartExternal runs the controlplane-external program on natsURL with the
// deployment c's secrets key (it opens the registered kubeconfigs) until
// the test ends; args are more flags (e.g. --external-resync=2s).
func StartExternal(t *testing.T, c *Capn, natsURL string, args ...string) {
	t.Helper()
	progs := programDir(t, "controlplane-external")
	StartProgram(t, filepath.Join(progs, "controlplane-external"), []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json", c.SecretsKeyEnv},
		append([]string{"--nats-url=" + natsURL, "--http-addr=off"}, args...)...)
}

// programDir is $CAPN_CONFORMANCE_BIN_DIR, or a new directory with the
// programs built (removed by Main).
func programDir(t *testing.T, programs ...string) string {
	t.Helper()
	if dir := os.Getenv(BinDirEnv); dir != "" {
		return dir
	}
	dir, err := BuildTemp(programs...)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// HostedLeftovers is what the hosted control plane of cluster still holds
// on this host after a delete: its directory under dataDir (StartHosted's),
// processes whose command line names it, and a listener on the endpoint of
// last, its record before the delete (nil: not checked).
func HostedLeftovers(dataDir, cluster string, last *capnv1.ControlPlaneRecord) []string {
	var left []string
	dir := filepath.Join(dataDir, cluster)
	if _, err := os.Stat(dir); err == nil {
		left = append(left, "directory "+dir)
	}
	for _, p := range ProcessesUnder(dir) {
		left = append(left, "process "+p)
	}
	if ep := last.GetEndpoint(); ep.GetPort() != 0 {
		addr := net.JoinHostPort(ep.GetHost(), strconv.Itoa(int(ep.GetPort())))
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = conn.Close()
			left = append(left, "something still listens on the endpoint "+addr)
		}
	}
	return left
}

// ProcessesUnder are the processes whose command line names dir (a path
// under it, or dir itself as an argument): "<pid>: <command line>".
func ProcessesUnder(dir string) []string {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		if strings.Contains(cmd, dir+"/") || strings.Contains(cmd+" ", dir+" ") {
			out = append(out, fmt.Sprintf("%s: %s", filepath.Base(filepath.Dir(p)), cmd[:min(len(cmd), 120)]))
		}
	}
	return out
}
