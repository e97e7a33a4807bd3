// Package kube_test is a smoke test of the Kubernetes binaries capn's
// workload clusters run, as `make kube` (hack/kube.sh) builds them: a
// one-member etcd, kube-apiserver, kube-controller-manager, kube-scheduler
// and kwok, all on 127.0.0.1 in a temporary directory, driven with kubectl.
//
// It finds the binaries in $CAPN_KUBE_BIN (the Makefile sets it to the bin
// directories of every KUBE_VERSIONS, colon-separated) and smoke-tests
// each version. Without them it is skipped with a message, unless
// CAPN_REQUIRE_KUBE=1 (CI), which makes that a failure.
package kube_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/internal/testkit"
)

// KubeVersion is the newest Kubernetes release `make kube` builds (KUBE_VERSION in
// the Makefile); a bin directory named by hack/kube.sh says its own.
const KubeVersion = "v1.37.2"

var binaries = []string{"etcd", "etcdctl", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"}

// kubeBins returns the directories of $CAPN_KUBE_BIN (one per version
// make kube built, colon-separated), each with every binary, or skips the
// test — fails it under CAPN_REQUIRE_KUBE=1.
func kubeBins(t *testing.T) []string {
	t.Helper()
	list := os.Getenv("CAPN_KUBE_BIN")
	var whys, dirs []string
	if list == "" {
		whys = append(whys, "CAPN_KUBE_BIN is not set")
	}
	for _, dir := range filepath.SplitList(list) {
		var missing []string
		for _, b := range binaries {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				missing = append(missing, b)
			}
		}
		if len(missing) > 0 {
			whys = append(whys, fmt.Sprintf("%s has no %s", dir, strings.Join(missing, ", ")))
			continue
		}
		dirs = append(dirs, dir)
	}
	if len(whys) == 0 {
		return dirs
	}
	why := "CAPN_KUBE_BIN: " + strings.Join(whys, "; ")
	if os.Getenv("CAPN_REQUIRE_KUBE") == "1" {
		t.Fatalf("CAPN_REQUIRE_KUBE=1 but %s: build the binaries with `make kube` (hack/kube.sh)", why)
	}
	t.Skipf("Kubernetes smoke test skipped: %s; run `make kube` to build the binaries (set CAPN_REQUIRE_KUBE=1 to fail instead)", why)
	return nil
}

// wantVersion is the version in the bin directory's name
// (…/k8s-<version>_etcd-…/bin), or KubeVersion.
func wantVersion(bin string) string {
	if m := regexp.MustCompile(`^k8s-(v[^_]+)_`).FindStringSubmatch(filepath.Base(filepath.Dir(bin))); m != nil {
		return m[1]
	}
	return KubeVersion
}

// TestControlPlaneSmoke runs the smoke test on every version built.
func TestControlPlaneSmoke(t *testing.T) {
	bins := kubeBins(t)
	if testing.Short() {
		t.Skip("starts a whole control plane; skipped with -short")
	}
	for _, bin := range bins {
		t.Run(wantVersion(bin), func(t *testing.T) { smoke(t, bin) })
	}
}

func smoke(t *testing.T, bin string) {
	version := wantVersion(bin)
	dir := t.TempDir()
	begin := time.Now()
	step := func(name string, since time.Time) { t.Logf("step %-34s %6.1fs", name, time.Since(since).Seconds()) }

	// --- certificates ------------------------------------------------------
	s := time.Now()
	pki := newPKI(t, dir)
	step("certificates", s)

	// --- etcd ----------------------------------------------------------------
	s = time.Now()
	etcdClient, etcdPeer := freePort(t), freePort(t)
	clientURL := "http://127.0.0.1:" + etcdClient
	peerURL := "http://127.0.0.1:" + etcdPeer
	etcd := start(t, dir, bin, "etcd",
		"--name=smoke",
		"--data-dir="+filepath.Join(dir, "etcd-data"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=smoke="+peerURL,
		"--initial-cluster-state=new",
		"--unsafe-no-fsync", // a throwaway member: don't wait on a shared disk
	)
	waitFor(t, etcd, "etcd /health", 60*time.Second, func() error {
		body, err := get(http.DefaultClient, clientURL+"/health")
		if err == nil && !strings.Contains(body, `"health":"true"`) {
			err = fmt.Errorf("/health: %s", body)
		}
		return err
	})
	step("etcd healthy", s)

	s = time.Now()
	out := run(t, bin, "etcdctl", "--endpoints="+clientURL, "member", "list", "-w", "json")
	var members struct {
		Members []struct {
			Name string `json:"name"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &members); err != nil {
		t.Fatalf("etcdctl member list: %v\n%s", err, out)
	}
	if len(members.Members) != 1 || members.Members[0].Name != "smoke" {
		t.Fatalf("etcdctl member list: want the one member smoke, got %s", out)
	}
	step("etcdctl member list", s)

	// --- kube-apiserver --------------------------------------------------------
	s = time.Now()
	apiPort := freePort(t)
	server := "https://127.0.0.1:" + apiPort
	apiserver := start(t, dir, bin, "kube-apiserver",
		"--bind-address=127.0.0.1",
		"--secure-port="+apiPort,
		"--advertise-address=127.0.0.1",
		"--etcd-servers="+clientURL,
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.96.0.0/12",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.file("sa.pub"),
		"--service-account-signing-key-file="+pki.file("sa.key"),
		"--client-ca-file="+pki.file("ca.crt"),
		"--tls-cert-file="+pki.file("serving.crt"),
		"--tls-private-key-file="+pki.file("serving.key"),
		"--authorization-mode=Node,RBAC",
		"--cert-dir="+filepath.Join(dir, "apiserver-certs"),
	)
	admin := pki.client(t, "admin")
	// Generous: a first start on a busy 2-core machine takes a while.
	waitFor(t, apiserver, "kube-apiserver /readyz", 120*time.Second, func() error {
		body, err := get(admin, server+"/readyz")
		if err == nil && strings.TrimSpace(body) != "ok" {
			err = fmt.Errorf("/readyz: %s", body)
		}
		return err
	})
	step("kube-apiserver ready", s)

	adminKubeconfig := pki.kubeconfig(t, server, "admin")

	s = time.Now()
	out = run(t, bin, "kubectl", "--kubeconfig="+adminKubeconfig, "version", "-o", "json")
	var versions struct {
		ClientVersion struct{ GitVersion string } `json:"clientVersion"`
		ServerVersion struct {
			GitVersion string
			Major      string
			Minor      string
		} `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(out), &versions); err != nil {
		t.Fatalf("kubectl version -o json: %v\n%s", err, out)
	}
	if versions.ServerVersion.GitVersion != version || versions.ClientVersion.GitVersion != version {
		t.Fatalf("kubectl version: want client and server %s, got client %q server %q\n%s",
			version, versions.ClientVersion.GitVersion, versions.ServerVersion.GitVersion, out)
	}
	t.Logf("server %s (major %s, minor %s)", versions.ServerVersion.GitVersion, versions.ServerVersion.Major, versions.ServerVersion.Minor)
	// kube-system is made by a post-start hook; give it a moment.
	waitFor(t, apiserver, "namespace kube-system", 30*time.Second, func() error {
		out, err := kubectl(bin, adminKubeconfig, "get", "ns", "-o", "name")
		if err == nil && !strings.Contains(out, "namespace/kube-system") {
			err = fmt.Errorf("kubectl get ns: %s", out)
		}
		return err
	})
	step("kubectl version, get ns", s)

	// --- kube-controller-manager and kube-scheduler -----------------------------
	s = time.Now()
	kcmPort, schedPort := freePort(t), freePort(t)
	kcmKubeconfig := pki.kubeconfig(t, server, "kube-controller-manager")
	schedKubeconfig := pki.kubeconfig(t, server, "kube-scheduler")
	kcm := start(t, dir, bin, "kube-controller-manager",
		"--kubeconfig="+kcmKubeconfig,
		"--authentication-kubeconfig="+kcmKubeconfig,
		"--authorization-kubeconfig="+kcmKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+kcmPort,
		"--tls-cert-file="+pki.file("serving.crt"),
		"--tls-private-key-file="+pki.file("serving.key"),
		"--leader-elect=false",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+pki.file("sa.key"),
		"--root-ca-file="+pki.file("ca.crt"),
		"--cluster-signing-cert-file="+pki.file("ca.crt"),
		"--cluster-signing-key-file="+pki.file("ca.key"),
		"--service-cluster-ip-range=10.96.0.0/12",
	)
	sched := start(t, dir, bin, "kube-scheduler",
		"--kubeconfig="+schedKubeconfig,
		"--authentication-kubeconfig="+schedKubeconfig,
		"--authorization-kubeconfig="+schedKubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+schedPort,
		"--tls-cert-file="+pki.file("serving.crt"),
		"--tls-private-key-file="+pki.file("serving.key"),
		"--leader-elect=false",
	)
	// /healthz is always allowed; the serving certificate is signed by our CA.
	anon := pki.client(t, "")
	for _, c := range []struct {
		p    *proc
		port string
	}{{kcm, kcmPort}, {sched, schedPort}} {
		waitFor(t, c.p, c.p.name+" /healthz", 90*time.Second, func() error {
			body, err := get(anon, "https://127.0.0.1:"+c.port+"/healthz")
			if err == nil && strings.TrimSpace(body) != "ok" {
				err = fmt.Errorf("/healthz: %s", body)
			}
			return err
		})
	}
	step("controller-manager, scheduler", s)

	// --- kwok: a fake node becomes Ready ------------------------------------------
	s = time.Now()
	kwok := start(t, dir, bin, "kwok",
		"--kubeconfig="+adminKubeconfig,
		"--manage-all-nodes=true",
		"--config="+testdata(t, "kwok-stages.yaml"),
		"--node-ip=10.0.0.1",
	)
	node := filepath.Join(dir, "node.yaml")
	writeFile(t, node, `apiVersion: v1
kind: Node
metadata:
  name: kwok-node-0
  labels:
    kubernetes.io/hostname: kwok-node-0
    type: kwok
`)
	run(t, bin, "kubectl", "--kubeconfig="+adminKubeconfig, "create", "-f", node)
	waitFor(t, kwok, "node kwok-node-0 Ready (kwok)", 30*time.Second, func() error {
		out, err := kubectl(bin, adminKubeconfig, "get", "node", "kwok-node-0",
			"-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err == nil && strings.TrimSpace(out) != "True" {
			err = fmt.Errorf("Ready=%q", out)
		}
		return err
	})
	step("kwok node Ready", s)

	// --- the scheduler binds a pod to it ---------------------------------------------
	// The pod waits for the controller-manager's default service account and
	// for the node to lose its not-ready taint; the binding is the scheduler's.
	s = time.Now()
	pod := filepath.Join(dir, "pod.yaml")
	writeFile(t, pod, `apiVersion: v1
kind: Pod
metadata:
  name: smoke
  namespace: default
spec:
  automountServiceAccountToken: false
  nodeSelector:
    type: kwok
  containers:
  - name: c
    image: registry.invalid/smoke:1
`)
	waitFor(t, sched, "pod default/smoke created", 60*time.Second, func() error {
		_, err := kubectl(bin, adminKubeconfig, "create", "-f", pod)
		if err != nil && strings.Contains(err.Error(), "AlreadyExists") {
			return nil // an earlier attempt that timed out on our side
		}
		return err
	})
	waitFor(t, sched, "pod default/smoke bound to kwok-node-0", 60*time.Second, func() error {
		out, err := kubectl(bin, adminKubeconfig, "get", "pod", "smoke", "-n", "default", "-o", "jsonpath={.spec.nodeName}")
		if err == nil && strings.TrimSpace(out) != "kwok-node-0" {
			err = fmt.Errorf("nodeName=%q", out)
		}
		return err
	})
	step("pod scheduled onto kwok node", s)
	t.Logf("control plane up and checked in %.1fs", time.Since(begin).Seconds())
}

// --- processes ---------------------------------------------------------------

// proc is a component running in its own process group, logging to a file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// start runs bin/name with args; a t.Cleanup stops its process group.
func start(t *testing.T, dir, bin, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(filepath.Join(bin, name), args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), "HOME="+dir) // no ~/.kube, ~/.kwok of the user
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop ends the process group: SIGTERM, then SIGKILL after 15s, and checks
// that nothing of the group is left.
func (p *proc) stop(t *testing.T) {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Logf("%s did not stop on SIGTERM within 15s; killing it", p.name)
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Anything else in the group (none of these fork, but be sure).
	if err := testkit.Poll(10*time.Second, 100*time.Millisecond, func() error {
		if syscall.Kill(-pgid, 0) != nil {
			return nil // the group is gone
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return fmt.Errorf("process group %d still has processes after SIGKILL", pgid)
	}); err != nil {
		t.Errorf("%s: %v", p.name, err)
	}
}

// exited reports whether the process is gone, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// tail is the end of the component's log, for failure messages.
func (p *proc) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls check every 500ms until it succeeds, p exits or timeout
// passes; a failure shows the last error and the tail of p's log.
func waitFor(t *testing.T, p *proc, what string, timeout time.Duration, check func() error) {
	t.Helper()
	last := testkit.Poll(timeout, 500*time.Millisecond, func() error {
		last := check()
		if last == nil {
			return nil
		}
		if gone, err := p.exited(); gone {
			t.Fatalf("%s: %s exited (%v) while waiting; last check: %v\n--- tail of %s ---\n%s", what, p.name, err, last, p.log, p.tail())
		}
		return last
	})
	if last != nil {
		t.Fatalf("%s: not within %s; last check: %v\n--- tail of %s ---\n%s", what, timeout, last, p.log, p.tail())
	}
}

// run runs a command to completion (1 minute at most) and returns stdout;
// it fails the test on error.
func run(t *testing.T, bin, name string, args ...string) string {
	t.Helper()
	out, err := runErr(bin, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
	}
	return out
}

func runErr(bin, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func kubectl(bin, kubeconfig string, args ...string) (string, error) {
	return runErr(bin, "kubectl", append([]string{"--kubeconfig=" + kubeconfig, "--request-timeout=20s"}, args...)...)
}

func get(c *http.Client, url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return b.String(), fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(b.String()))
	}
	return b.String(), nil
}

// freePort is a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func testdata(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// --- PKI -----------------------------------------------------------------------

// pki is a CA with the apiserver's serving certificate (also used by the
// controller-manager and scheduler), client certificates and a
// service-account key pair, as files in dir.
type pki struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPool *x509.CertPool
	// users: name → certificate and key PEM.
	users map[string][2][]byte
}

func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	p := &pki{dir: filepath.Join(dir, "pki"), users: map[string][2][]byte{}}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "capn-smoke-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, err = x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p.caKey = caKey
	p.caPool = x509.NewCertPool()
	p.caPool.AddCert(p.ca)
	p.write(t, "ca.crt", pemBlock("CERTIFICATE", der))
	p.write(t, "ca.key", keyPEM(t, caKey))

	crt, key := p.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
	})
	p.write(t, "serving.crt", crt)
	p.write(t, "serving.key", key)

	for _, u := range []struct{ name, cn, org string }{
		{"admin", "kubernetes-admin", "system:masters"},
		{"kube-controller-manager", "system:kube-controller-manager", ""},
		{"kube-scheduler", "system:kube-scheduler", ""},
	} {
		subject := pkix.Name{CommonName: u.cn}
		if u.org != "" {
			subject.Organization = []string{u.org}
		}
		crt, key := p.issue(t, &x509.Certificate{Subject: subject, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		p.users[u.name] = [2][]byte{crt, key}
	}

	saKey := newKey(t)
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	p.write(t, "sa.key", keyPEM(t, saKey))
	p.write(t, "sa.pub", pemBlock("PUBLIC KEY", pub))
	return p
}

func (p *pki) issue(t *testing.T, tmpl *x509.Certificate) (crt, key []byte) {
	t.Helper()
	k := newKey(t)
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &k.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pemBlock("CERTIFICATE", der), keyPEM(t, k)
}

func (p *pki) file(name string) string { return filepath.Join(p.dir, name) }

func (p *pki) write(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(p.file(name), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// client is an HTTPS client trusting the CA, presenting user's certificate
// ("" for none).
func (p *pki) client(t *testing.T, user string) *http.Client {
	t.Helper()
	cfg := &tls.Config{RootCAs: p.caPool, MinVersion: tls.VersionTLS12}
	if user != "" {
		pair, err := tls.X509KeyPair(p.users[user][0], p.users[user][1])
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
}

// kubeconfig writes <user>.kubeconfig for server and returns its path.
func (p *pki) kubeconfig(t *testing.T, server, user string) string {
	t.Helper()
	b64 := base64.StdEncoding.EncodeToString
	caPEM := pemBlock("CERTIFICATE", p.ca.Raw)
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: smoke
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: %s@smoke
  context:
    cluster: smoke
    user: %s
current-context: %s@smoke
`, server, b64(caPEM), user, b64(p.users[user][0]), b64(p.users[user][1]), user, user, user)
	path := filepath.Join(filepath.Dir(p.dir), user+".kubeconfig")
	writeFile(t, path, content)
	return path
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keyPEM(t *testing.T, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pemBlock("EC PRIVATE KEY", der)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
