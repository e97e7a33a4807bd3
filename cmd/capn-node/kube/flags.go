package kube

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// Plan is what a control-plane machine runs, in start order.
type Plan struct {
	Etcd, APIServer, ControllerManager, Scheduler, Kwok Process
}

// ControlPlane lists the four control-plane processes in start order.
func (p Plan) ControlPlane() []Process {
	return []Process{p.Etcd, p.APIServer, p.ControllerManager, p.Scheduler}
}

// joining is etcd's process to join an existing cluster: the given
// --initial-cluster, and state existing.
func joining(p Process, initialCluster string) Process {
	args := make([]string, 0, len(p.Args))
	for _, a := range p.Args {
		switch {
		case strings.HasPrefix(a, "--initial-cluster="):
			a = "--initial-cluster=" + initialCluster
		case strings.HasPrefix(a, "--initial-cluster-state="):
			a = "--initial-cluster-state=existing"
		}
		args = append(args, a)
	}
	p.Args = args
	return p
}

// url is scheme://host:port.
func url(scheme string, host netip.Addr, port int) string {
	return scheme + "://" + net.JoinHostPort(host.String(), strconv.Itoa(port))
}

// Commands are the flags of kubeadm's static pods (v1.31+,
// cmd/kubeadm/app/phases/controlplane/manifests.go and etcd/local.go),
// with every listener bound to the machine's address instead of 0.0.0.0 or
// 127.0.0.1 — machines of one host share the loopback network, each on its
// own 127.a.b.x — and the API server's endpoint reconciler off (the
// `kubernetes` Service would otherwise point at a loopback address).
func Commands(cfg *kubelocal.NodeConfig, o Options, l Layout) (Plan, error) {
	addr, err := netip.ParseAddr(o.Address)
	if err != nil {
		return Plan{}, fmt.Errorf("address %q: %w", o.Address, err)
	}
	pkiFile := func(name string) string { return filepath.Join(l.PKIDir(), filepath.FromSlash(name)) }
	bin := func(name string) string { return filepath.Join(o.BinDir, name) }
	env := childEnv(o)
	p := o.Ports
	etcdClient := url("https", addr, p.EtcdClient)
	etcdPeer := url("https", addr, p.EtcdPeer)

	etcd := Process{Name: "etcd", Path: bin("etcd"), Env: env, Args: []string{
		"--name=" + cfg.NodeName,
		"--listen-client-urls=" + etcdClient,
		"--advertise-client-urls=" + etcdClient,
		"--listen-peer-urls=" + etcdPeer,
		"--initial-advertise-peer-urls=" + etcdPeer,
		"--initial-cluster=" + cfg.NodeName + "=" + etcdPeer,
		"--initial-cluster-state=new",
		"--data-dir=" + l.EtcdDataDir(),
		"--cert-file=" + pkiFile("etcd/server.crt"),
		"--key-file=" + pkiFile("etcd/server.key"),
		"--trusted-ca-file=" + pkiFile("etcd/ca.crt"),
		"--client-cert-auth=true",
		"--peer-cert-file=" + pkiFile("etcd/peer.crt"),
		"--peer-key-file=" + pkiFile("etcd/peer.key"),
		"--peer-trusted-ca-file=" + pkiFile("etcd/ca.crt"),
		"--peer-client-cert-auth=true",
		"--snapshot-count=10000",
	}}

	api := Process{Name: "kube-apiserver", Path: bin("kube-apiserver"), Env: env, Args: []string{
		"--advertise-address=" + addr.String(),
		"--bind-address=" + addr.String(),
		"--secure-port=" + strconv.Itoa(p.APIServer),
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--enable-bootstrap-token-auth=true",
		"--client-ca-file=" + pkiFile("ca-bundle.crt"),
		"--tls-cert-file=" + pkiFile("apiserver.crt"),
		"--tls-private-key-file=" + pkiFile("apiserver.key"),
		"--cert-dir=" + l.CertDir(),
		"--etcd-servers=" + etcdClient,
		"--etcd-cafile=" + pkiFile("etcd/ca.crt"),
		"--etcd-certfile=" + pkiFile("apiserver-etcd-client.crt"),
		"--etcd-keyfile=" + pkiFile("apiserver-etcd-client.key"),
		"--kubelet-client-certificate=" + pkiFile("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + pkiFile("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--proxy-client-cert-file=" + pkiFile("front-proxy-client.crt"),
		"--proxy-client-key-file=" + pkiFile("front-proxy-client.key"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-client-ca-file=" + pkiFile("front-proxy-ca.crt"),
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--service-account-issuer=https://kubernetes.default.svc." + cfg.DNSDomain,
		"--service-account-key-file=" + pkiFile("sa.pub"),
		"--service-account-signing-key-file=" + pkiFile("sa.key"),
		"--service-cluster-ip-range=" + cfg.ServiceCIDR,
	}}

	kcmConf := l.KubeconfigPath("controller-manager")
	kcmArgs := []string{
		"--bind-address=" + addr.String(),
		"--secure-port=" + strconv.Itoa(p.ControllerManager),
		"--cert-dir=" + l.CertDir(),
		"--leader-elect=true",
		"--kubeconfig=" + kcmConf,
		"--authentication-kubeconfig=" + kcmConf,
		"--authorization-kubeconfig=" + kcmConf,
		"--client-ca-file=" + pkiFile("ca-bundle.crt"),
		"--requestheader-client-ca-file=" + pkiFile("front-proxy-ca.crt"),
		"--root-ca-file=" + pkiFile("ca-bundle.crt"),
		"--service-account-private-key-file=" + pkiFile("sa.key"),
		"--cluster-signing-cert-file=" + pkiFile("ca.crt"),
		"--cluster-signing-key-file=" + pkiFile("ca.key"),
		"--use-service-account-credentials=true",
		"--controllers=*,bootstrapsigner,tokencleaner",
		"--allocate-node-cidrs=true",
		"--cluster-cidr=" + cfg.PodCIDR,
		"--service-cluster-ip-range=" + cfg.ServiceCIDR,
		"--cluster-name=" + cfg.Cluster,
	}
	if mask, ok := nodeCIDRMask(cfg.PodCIDR); ok {
		kcmArgs = append(kcmArgs, "--node-cidr-mask-size="+strconv.Itoa(mask))
	}
	kcm := Process{Name: "kube-controller-manager", Path: bin("kube-controller-manager"), Env: env, Args: kcmArgs}

	schedConf := l.KubeconfigPath("scheduler")
	sched := Process{Name: "kube-scheduler", Path: bin("kube-scheduler"), Env: env, Args: []string{
		"--bind-address=" + addr.String(),
		"--secure-port=" + strconv.Itoa(p.Scheduler),
		"--cert-dir=" + l.CertDir(),
		"--leader-elect=true",
		"--kubeconfig=" + schedConf,
		"--authentication-kubeconfig=" + schedConf,
		"--authorization-kubeconfig=" + schedConf,
	}}

	kwok := KwokProcess(cfg, o, l, l.AdminKubeconfig())
	return Plan{Etcd: etcd, APIServer: api, ControllerManager: kcm, Scheduler: sched, Kwok: kwok}, nil
}

// KwokProcess is kwok standing in for this machine's kubelet, as the
// user of kubeconfig: the local admin on a control-plane machine, the
// node's own credentials (system:node:<name>) on a worker.
func KwokProcess(cfg *kubelocal.NodeConfig, o Options, l Layout, kubeconfig string) Process {
	return Process{Name: "kwok", Path: filepath.Join(o.BinDir, "kwok"), Env: childEnv(o), Args: []string{
		"--kubeconfig=" + kubeconfig,
		"--config=" + l.KwokConfig(),
		// Only this machine's Node: when the machine is gone, nothing
		// renews its Lease and the Node goes NotReady, as with a kubelet.
		"--manage-single-node=" + cfg.NodeName,
		"--node-ip=" + o.Address,
		"--node-lease-duration-seconds=40",
	}}
}

// childEnv is a child's whole environment.
func childEnv(o Options) []string {
	return []string{"HOME=" + filepath.Join(o.DataDir, "home"), "PATH=/usr/local/bin:/usr/bin:/bin"}
}

// nodeCIDRMask is the per-node pod CIDR size when the controller-manager's
// default (/24 for IPv4, /64 for IPv6) does not fit in the cluster's pod
// CIDR: a quarter of it, so a few nodes still get one.
func nodeCIDRMask(podCIDR string) (int, bool) {
	p, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return 0, false
	}
	def := 24
	if p.Addr().Is6() {
		def = 64
	}
	if p.Bits() < def {
		return 0, false
	}
	return min(p.Bits()+2, p.Addr().BitLen()), true
}
