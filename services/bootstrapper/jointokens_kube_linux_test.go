package bootstrapper_test

import (
	"context"
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

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/kubeapi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper"
	"github.com/capn-dev/capn/services/bootstrapper/pki"
	"github.com/capn-dev/capn/services/bootstrapper/token"
)

// The same flow against a real etcd and kube-apiserver (the binaries of
// `make kube`, found in $CAPN_KUBE_BIN; skipped without them and with
// -short): the token the bootstrapper registers authenticates as a joining
// node — what a worker of a kube-local cluster needs — and stops working
// once the machine joined.
func TestJoinTokensWithARealAPIServer(t *testing.T) {
	bin := os.Getenv("CAPN_KUBE_BIN")
	if bin == "" {
		t.Skip("CAPN_KUBE_BIN is not set (`make kube` builds the binaries; hack/kube.sh --print-path says where)")
	}
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Skipf("CAPN_KUBE_BIN=%s: %v", bin, err)
		}
	}
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver; skipped with -short")
	}
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.startWith(bootstrapper.Config{Keyring: ring, Workers: 2})
	const c = "real"
	e.applyClusterWith(c, "kube-local", "")
	e.waitPKI(ring, c)
	set := e.openPKI(ring, c)

	// The cluster's PKI as kube-apiserver reads it.
	dir := t.TempDir()
	now := time.Now()
	ca, err := pki.ParseCA(pki.KeyPair{CertPEM: []byte(set.GetCa().GetCertPem()), KeyPEM: []byte(set.GetCa().GetKeyPem())}, now)
	if err != nil {
		t.Fatal(err)
	}
	serving, err := pki.IssueLeaf(ca, pki.LeafRequest{CommonName: "kube-apiserver", IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}, now)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := pki.IssueAdmin(ca, now)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"ca.crt": set.GetCa().GetCertPem(), "apiserver.crt": string(serving.CertPEM), "apiserver.key": string(serving.KeyPEM),
		"sa.pub": set.GetServiceAccount().GetCertPem(), "sa.key": set.GetServiceAccount().GetKeyPem(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	file := func(n string) string { return filepath.Join(dir, n) }

	etcdClient, etcdPeer, apiPort := strconv.Itoa(freePort(t)), strconv.Itoa(freePort(t)), freePort(t)
	startProc(t, dir, filepath.Join(bin, "etcd"), "--name=real", "--data-dir="+file("etcd"),
		"--listen-client-urls=http://127.0.0.1:"+etcdClient, "--advertise-client-urls=http://127.0.0.1:"+etcdClient,
		"--listen-peer-urls=http://127.0.0.1:"+etcdPeer, "--initial-advertise-peer-urls=http://127.0.0.1:"+etcdPeer,
		"--initial-cluster=real=http://127.0.0.1:"+etcdPeer, "--unsafe-no-fsync")
	api := startProc(t, dir, filepath.Join(bin, "kube-apiserver"), "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(apiPort),
		"--advertise-address=127.0.0.1", "--etcd-servers=http://127.0.0.1:"+etcdClient, "--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.96.0.0/12", "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+file("sa.pub"), "--service-account-signing-key-file="+file("sa.key"),
		"--client-ca-file="+file("ca.crt"), "--tls-cert-file="+file("apiserver.crt"), "--tls-private-key-file="+file("apiserver.key"),
		"--authorization-mode=Node,RBAC", "--enable-bootstrap-token-auth", "--cert-dir="+file("certs"))
	server := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	adminClient, err := kubeapi.NewClient(server, []byte(set.GetCa().GetCertPem()), admin.CertPEM, admin.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	defer adminClient.Close()
	begin := time.Now()
	waitProc(t, api, "kube-apiserver /readyz", 3*time.Minute, func() error {
		if err := adminClient.Ready(context.Background()); err != nil {
			return err
		}
		return adminClient.Get(context.Background(), "/api/v1/namespaces/kube-system", &struct{}{})
	})
	t.Logf("etcd and kube-apiserver ready in %s", time.Since(begin).Round(100*time.Millisecond))

	e.reportEndpointAt(c, int32(apiPort))
	e.generate(e.collect(c), c, "real-w-0", "worker", false, &capnv1.BootstrapSpec{Provider: "kube-local"})
	rec := e.record(ring, c, "real-w-0")
	tok, err := token.Parse(rec.GetToken())
	if err != nil {
		t.Fatal(err)
	}
	// whoami asks the API server who the token is (SelfSubjectReview: any
	// authenticated user may).
	whoami := func() (string, []string, error) {
		tc, err := kubeapi.NewTokenClient(server, []byte(set.GetCa().GetCertPem()), tok.Value())
		if err != nil {
			return "", nil, err
		}
		defer tc.Close()
		var out struct {
			Status struct {
				UserInfo struct {
					Username string   `json:"username"`
					Groups   []string `json:"groups"`
				} `json:"userInfo"`
			} `json:"status"`
		}
		err = tc.Do(context.Background(), http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", "application/json",
			map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, &out)
		return out.Status.UserInfo.Username, out.Status.UserInfo.Groups, err
	}
	natstest.WaitFor(t, 20*time.Second, "the worker's token to authenticate as a joining node", func() bool {
		user, groups, err := whoami()
		return err == nil && user == "system:bootstrap:"+tok.ID && strings.Contains(strings.Join(groups, ","), token.NodeGroup)
	})
	var secret struct {
		Type string            `json:"type"`
		Data map[string][]byte `json:"data"`
	}
	if err := adminClient.Get(context.Background(), "/api/v1/namespaces/kube-system/secrets/"+token.SecretName(tok), &secret); err != nil {
		t.Fatal(err)
	}
	if secret.Type != token.SecretType || string(secret.Data["expiration"]) != rec.GetTokenExpires().AsTime().UTC().Format(time.RFC3339) {
		t.Fatalf("Secret type %q, expiration %q; want %s, %s", secret.Type, secret.Data["expiration"], token.SecretType, rec.GetTokenExpires().AsTime().UTC().Format(time.RFC3339))
	}

	e.setPhase(c, "real-w-0", "Running")
	natstest.WaitFor(t, 20*time.Second, "the token refused once the machine joined", func() bool {
		_, _, err := whoami()
		return kubeapi.IsStatus(err, http.StatusUnauthorized)
	})
	if err := adminClient.Get(context.Background(), "/api/v1/namespaces/kube-system/secrets/"+token.SecretName(tok), &struct{}{}); !kubeapi.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("the Secret after the join: %v, want 404", err)
	}
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

func waitProc(t *testing.T, p *proc, what string, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		last := check()
		if last == nil {
			return
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(p.log)
			t.Fatalf("%s: %s exited (%v); last check: %v\n%s", what, p.name, p.err, last, tail(string(log)))
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(p.log)
			t.Fatalf("%s: not within %s; last check: %v\n%s", what, timeout, last, tail(string(log)))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}
