package conformance

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// kubeadmEtcdClientURLsAnnotation is what kubeadm puts on the static Pod
// of each stacked etcd member (kube-system/etcd-<node>): its client URLs.
const kubeadmEtcdClientURLsAnnotation = "kubeadm.kubernetes.io/etcd.advertise-client-urls"

// etcdPKI are the files of /etc/kubernetes/pki that etcdctl needs, as
// both kubeadm and kube-local write them on a control plane: etcd's CA
// and the API server's etcd client certificate.
var etcdPKI = []string{"etcd/ca.crt", "apiserver-etcd-client.crt", "apiserver-etcd-client.key"}

// Etcdctl runs etcdctl of the cluster's Bin as a control plane's API
// server talks to etcd: with the etcd CA and the API server's etcd client
// certificate read from that control plane's disk.
type Etcdctl struct {
	k   *KubeCluster
	pki string
}

// EtcdMember is one member of `etcdctl member list -w json`.
type EtcdMember struct {
	ID         uint64   `json:"ID"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
	IsLearner  bool     `json:"isLearner"`
}

// EtcdHealth is one endpoint of `etcdctl endpoint health -w json`.
type EtcdHealth struct {
	Endpoint string `json:"endpoint"`
	Health   bool   `json:"health"`
	Error    string `json:"error"`
}

// Etcdctl copies the certificates from a control plane's disk (readFile
// of /etc/kubernetes/pki/<file>) into a directory of the test's and
// returns an etcdctl that uses them.
func (k *KubeCluster) Etcdctl(readFile func(path string) ([]byte, bool)) *Etcdctl {
	k.T.Helper()
	pki := k.T.TempDir()
	for _, f := range etcdPKI {
		b, ok := readFile("/etc/kubernetes/pki/" + f)
		if !ok {
			k.T.Fatalf("etcdctl: no /etc/kubernetes/pki/%s on the control plane", f)
		}
		k.Write(filepath.Join(pki, filepath.Base(f)), string(b))
	}
	return &Etcdctl{k: k, pki: pki}
}

// Run runs etcdctl against endpoints with -w json and decodes its output
// into out.
func (c *Etcdctl) Run(endpoints []string, out any, args ...string) error {
	b, err := c.k.Run("etcdctl", append([]string{"--endpoints=" + strings.Join(endpoints, ","), "--command-timeout=10s",
		"--cacert=" + filepath.Join(c.pki, "ca.crt"),
		"--cert=" + filepath.Join(c.pki, "apiserver-etcd-client.crt"),
		"--key=" + filepath.Join(c.pki, "apiserver-etcd-client.key"), "-w", "json"}, args...)...)
	// endpoint health exits non-zero when one is unhealthy, and still
	// says which: decode what it printed either way.
	if jerr := json.Unmarshal([]byte(b), out); jerr != nil {
		if err != nil {
			return err
		}
		return fmt.Errorf("etcdctl %s: %v: %s", strings.Join(args, " "), jerr, b)
	}
	return nil
}

// Members lists etcd's members, asked at endpoints.
func (c *Etcdctl) Members(endpoints []string) ([]EtcdMember, error) {
	var l struct {
		Members []EtcdMember `json:"members"`
	}
	err := c.Run(endpoints, &l, "member", "list")
	return l.Members, err
}

// Health asks each of endpoints whether it is healthy; an error when one
// is not, or did not answer.
func (c *Etcdctl) Health(endpoints []string) ([]EtcdHealth, error) {
	var h []EtcdHealth
	if err := c.Run(endpoints, &h, "endpoint", "health"); err != nil {
		return h, err
	}
	if len(h) != len(endpoints) {
		return h, fmt.Errorf("etcdctl endpoint health: %d answers for the %d endpoints %v: %+v", len(h), len(endpoints), endpoints, h)
	}
	for _, e := range h {
		if !e.Health {
			return h, fmt.Errorf("etcd endpoint %s unhealthy: %s", e.Endpoint, e.Error)
		}
	}
	return h, nil
}

// etcdEndpoints are the client URLs of the etcd members of the
// control-plane Nodes cps: for kube-local, the annotation its
// control-plane Nodes carry; for kubeadm (Kubeadm), the one kubeadm puts
// on each member's static Pod.
func (k *KubeCluster) etcdEndpoints(cps []string) ([]string, error) {
	what, annotation, args := "control-plane Nodes", etcdClientURLsAnnotation, []string{"get", "nodes", "-l", "node-role.kubernetes.io/control-plane", "-o", "json"}
	if k.Kubeadm {
		what, annotation, args = "etcd Pods", kubeadmEtcdClientURLsAnnotation, []string{"get", "pods", "-n", "kube-system", "-l", "component=etcd", "-o", "json"}
	}
	out, err := k.Kubectl(args...)
	if err != nil {
		return nil, err
	}
	var l struct {
		Items []struct {
			Metadata struct {
				Name        string            `json:"name"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				NodeName string `json:"nodeName"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return nil, fmt.Errorf("kubectl %s: %v", strings.Join(args, " "), err)
	}
	var endpoints []string
	for _, it := range l.Items {
		node := it.Metadata.Name
		if k.Kubeadm {
			node = it.Spec.NodeName
		}
		if u := it.Metadata.Annotations[annotation]; u != "" && slices.Contains(cps, node) {
			endpoints = append(endpoints, u)
		}
	}
	if len(endpoints) != len(cps) {
		return nil, fmt.Errorf("%d %s of the control planes %v carry %s", len(endpoints), what, cps, annotation)
	}
	return endpoints, nil
}

// WaitEtcd waits until the cluster's etcd, asked with etcdctl (client
// URLs from the control planes' annotation, kube-local's or kubeadm's;
// the etcd client certificate read from a control-plane machine's disk
// with readFile), has exactly the machines cps as voting members and
// every endpoint healthy. It returns the member names.
func (k *KubeCluster) WaitEtcd(cps []string, readFile func(machine, path string) ([]byte, bool), timeout time.Duration) []string {
	k.T.Helper()
	etcdctl := k.Etcdctl(func(path string) ([]byte, bool) { return readFile(cps[0], path) })
	var names []string
	Poll(k.T, fmt.Sprintf("etcd with exactly the %d voting members %v, all healthy", len(cps), cps), timeout, func() error {
		endpoints, err := k.etcdEndpoints(cps)
		if err != nil {
			return err
		}
		members, err := etcdctl.Members(endpoints)
		if err != nil {
			return err
		}
		names = nil
		for _, m := range members {
			n := m.Name
			if n == "" {
				n = "(unstarted)"
			}
			if m.IsLearner {
				n += "[learner]"
			}
			names = append(names, n)
		}
		sort.Strings(names)
		if !slices.Equal(names, cps) {
			return fmt.Errorf("etcd members %v, want %v", names, cps)
		}
		_, err = etcdctl.Health(endpoints)
		return err
	})
	return names
}
