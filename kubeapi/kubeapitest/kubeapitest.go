//go:build linux

// Package kubeapitest runs a real etcd and kube-apiserver, from the
// binaries `make kube` builds ($CAPN_KUBE_BIN), for tests of capn's
// services that talk to workload clusters (the bootstrapper's join
// tokens, the health-watcher's Node reads).
package kubeapitest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/pki"
)

// Server is an etcd and a kube-apiserver on 127.0.0.1, run until the test
// ends.
type Server struct {
	// URL is the API server's https://127.0.0.1:<Port>.
	URL  string
	Port int
	// Admin is a client in system:masters, with the certificate AdminPair
	// the CA issued.
	Admin     *kubeapi.Client
	AdminPair pki.KeyPair

	bin, dir string
	caPEM    []byte
}

// Start runs them with the cluster CA ca and the service-account key pair
// (PEM), with RBAC and the Node authorizer; extraArgs go to
// kube-apiserver. It returns once /readyz answers and kube-system exists.
// Without the binaries, or with -short, the test is skipped.
func Start(t *testing.T, ca pki.KeyPair, saPub, saKey []byte, extraArgs ...string) *Server {
	t.Helper()
	bin := Require(t)
	now := time.Now()
	parsed, err := pki.ParseCA(ca, now)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.IssueLeaf(parsed, pki.LeafRequest{CommonName: "kube-apiserver", IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}, now)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pki.IssueAdmin(parsed, now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := func(n string) string { return filepath.Join(dir, n) }
	for name, data := range map[string][]byte{"ca.crt": ca.CertPEM, "apiserver.crt": serving.CertPEM, "apiserver.key": serving.KeyPEM,
		"sa.pub": saPub, "sa.key": saKey} {
		if err := os.WriteFile(file(name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	etcdClient, etcdPeer, apiPort := strconv.Itoa(freePort(t)), strconv.Itoa(freePort(t)), freePort(t)
	startProc(t, dir, filepath.Join(bin, "etcd"), "--name=test", "--data-dir="+file("etcd"),
		"--listen-client-urls=http://127.0.0.1:"+etcdClient, "--advertise-client-urls=http://127.0.0.1:"+etcdClient,
		"--listen-peer-urls=http://127.0.0.1:"+etcdPeer, "--initial-advertise-peer-urls=http://127.0.0.1:"+etcdPeer,
		"--initial-cluster=test=http://127.0.0.1:"+etcdPeer, "--unsafe-no-fsync")
	api := startProc(t, dir, filepath.Join(bin, "kube-apiserver"), append([]string{"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(apiPort),
		"--advertise-address=127.0.0.1", "--etcd-servers=http://127.0.0.1:" + etcdClient, "--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.96.0.0/12", "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + file("sa.pub"), "--service-account-signing-key-file=" + file("sa.key"),
		"--client-ca-file=" + file("ca.crt"), "--tls-cert-file=" + file("apiserver.crt"), "--tls-private-key-file=" + file("apiserver.key"),
		"--authorization-mode=Node,RBAC", "--cert-dir=" + file("certs")}, extraArgs...)...)
	s := &Server{URL: fmt.Sprintf("https://127.0.0.1:%d", apiPort), Port: apiPort, AdminPair: admin, bin: bin, dir: dir, caPEM: ca.CertPEM}
	if s.Admin, err = kubeapi.NewClient(s.URL, ca.CertPEM, admin.CertPEM, admin.KeyPEM); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Admin.Close)
	begin := time.Now()
	waitProc(t, api, "kube-apiserver /readyz", 3*time.Minute, func() error {
		if err := s.Admin.Ready(context.Background()); err != nil {
			return err
		}
		return s.Admin.Get(context.Background(), "/api/v1/namespaces/kube-system", &struct{}{})
	})
	t.Logf("etcd and kube-apiserver ready in %s", time.Since(begin).Round(100*time.Millisecond))
	return s
}

// StartControllerManager runs kube-controller-manager against s with
// only the given controllers (e.g. "disruption", which computes a
// PodDisruptionBudget's status.disruptionsAllowed), as the admin, until
// the test ends. It returns once the process serves (its /healthz on
// the secure port it picked answers); a controller's work is waited for
// by the test. Without the binary the test is skipped.
func (s *Server) StartControllerManager(t *testing.T, controllers ...string) {
	t.Helper()
	s.StartControllerManagerArgs(t, nil, controllers...)
}

// StartControllerManagerArgs is StartControllerManager with extraArgs
// for kube-controller-manager (e.g. --cluster-signing-cert-file and
// --cluster-signing-key-file, for the csrsigning controller).
func (s *Server) StartControllerManagerArgs(t *testing.T, extraArgs []string, controllers ...string) {
	t.Helper()
	path := filepath.Join(s.bin, "kube-controller-manager")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("CAPN_KUBE_BIN=%s: %v", s.bin, err)
	}
	kc, err := kubeconfig.Render(kubeconfig.Input{ClusterName: "test", Host: "127.0.0.1", Port: int32(s.Port),
		CACertPEM: s.caPEM, ClientCertPEM: s.AdminPair.CertPEM, ClientKeyPEM: s.AdminPair.KeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.dir, "kcm")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	kcPath := filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	p := startProc(t, dir, path, append([]string{"--kubeconfig=" + kcPath, "--authentication-kubeconfig=" + kcPath, "--authorization-kubeconfig=" + kcPath,
		"--controllers=" + strings.Join(controllers, ","), "--leader-elect=false", "--use-service-account-credentials=false",
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port), "--cert-dir=" + filepath.Join(dir, "certs")}, extraArgs...)...)
	insecure := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a test process's self-signed serving certificate
	waitProc(t, p, "kube-controller-manager /healthz", time.Minute, func() error {
		resp, err := insecure.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", port))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %d", resp.StatusCode)
		}
		return nil
	})
}

// Require skips the test without etcd and kube-apiserver in a directory
// of $CAPN_KUBE_BIN, or with -short, and returns the directory of the
// newest version (see Bins): a test calls it first, before it sets up
// what Start's server is for.
func Require(t *testing.T) string {
	t.Helper()
	bin, why := Newest("etcd", "kube-apiserver")
	if bin == "" {
		t.Skipf("%s (`make kube` builds the binaries; make prints the directories: make -s kube-bin)", why)
	}
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver; skipped with -short")
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
}

// startProc runs path in its own process group, killed with the test (and
// by the kernel if the test binary dies first); its output goes to a log.
func startProc(t *testing.T, dir, path string, args ...string) *proc {
	t.Helper()
	p := &proc{name: filepath.Base(path), log: filepath.Join(dir, filepath.Base(path)+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(path, args...)
	p.cmd.Stdout, p.cmd.Stderr, p.cmd.Dir = f, f, dir
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", p.name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	return p
}

// waitProc runs check until it succeeds; it fails the test, with the
// tail of p's log, when p exits or timeout passes first.
func waitProc(t *testing.T, p *proc, what string, timeout time.Duration, check func() error) {
	t.Helper()
	last := testkit.Poll(timeout, 500*time.Millisecond, func() error {
		err := check()
		if err != nil {
			select {
			case <-p.done:
				log, _ := os.ReadFile(p.log)
				t.Fatalf("%s: %s exited (%v); last check: %v\n%s", what, p.name, p.err, err, tail(string(log)))
			default:
			}
		}
		return err
	})
	if last != nil {
		log, _ := os.ReadFile(p.log)
		t.Fatalf("%s: not within %s; last check: %v\n%s", what, timeout, last, tail(string(log)))
	}
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}
