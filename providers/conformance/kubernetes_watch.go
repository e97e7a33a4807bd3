package conformance

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// The day-2 check's witnesses: what a user would watch while capn
// upgrades, drains and scales a real cluster — the Deployment's pods and
// the Nodes (kubectl get -w), the API server through the cluster's
// endpoint, and etcd's membership.

// watchEvent is one line of `kubectl get -w --output-watch-events -o json`.
type watchEvent struct {
	Type   string          `json:"type"`
	Object json.RawMessage `json:"object"`
}

// kubeObject is what the witnesses read of a pod or a Node.
type kubeObject struct {
	Metadata struct {
		Name              string  `json:"name"`
		UID               string  `json:"uid"`
		ResourceVersion   string  `json:"resourceVersion"`
		DeletionTimestamp *string `json:"deletionTimestamp"`
	} `json:"metadata"`
	Spec struct {
		NodeName      string `json:"nodeName"`
		Unschedulable bool   `json:"unschedulable"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type, Status string
		} `json:"conditions"`
	} `json:"status"`
}

func (o kubeObject) condition(typ string) string {
	for _, c := range o.Status.Conditions {
		if c.Type == typ {
			return c.Status
		}
	}
	return ""
}

// kubeWatch follows the collection at path (e.g. /api/v1/nodes) until
// stop the way an informer does, with the kubeconfig's credentials: a list
// handed to reset whole, then watches that each resume from the last
// resourceVersion seen (so nothing is missed between two watches), each
// ended by the server after 15 s (timeoutSeconds) and bounded by the
// client at 30 s — a connection left half open when an API server behind
// the cluster's endpoint goes away cannot stall it. A watch that cannot
// resume (410 Gone, an error) lists again.
func (k *KubeCluster) kubeWatch(ctx context.Context, wg *sync.WaitGroup, reset func([]kubeObject), on func(typ string, o kubeObject), path string) {
	client, server := k.kubeconfigClient()
	client.Timeout = 30 * time.Second
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			rv, err := listInto(ctx, client, server+path, reset)
			for err == nil && ctx.Err() == nil {
				rv, err = watchFrom(ctx, client, server+path+sep+"watch=1&allowWatchBookmarks=true&timeoutSeconds=15&resourceVersion="+rv, rv, on)
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond): // an API server gone: list again
			}
		}
	}()
}

func listInto(ctx context.Context, c *http.Client, url string, reset func([]kubeObject)) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var l struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []kubeObject `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return "", err
	}
	reset(l.Items)
	return l.Metadata.ResourceVersion, nil
}

// watchFrom runs one watch and returns the resourceVersion to resume
// from; an error means list again.
func watchFrom(ctx context.Context, c *http.Client, url, rv string, on func(string, kubeObject)) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return rv, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return rv, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return rv, fmt.Errorf("watch %s: %s", url, resp.Status)
	}
	dec := json.NewDecoder(bufio.NewReader(resp.Body))
	for {
		var ev watchEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return rv, nil // the server ended it (timeoutSeconds)
			}
			return rv, err
		}
		var o kubeObject
		if err := json.Unmarshal(ev.Object, &o); err != nil {
			return rv, err
		}
		switch ev.Type {
		case "ERROR":
			return rv, fmt.Errorf("watch %s: %s", url, ev.Object)
		case "BOOKMARK":
		default:
			on(ev.Type, o)
		}
		if o.Metadata.ResourceVersion != "" {
			rv = o.Metadata.ResourceVersion
		}
	}
}

// PodWitness follows the pods of a label selector: how many are Ready and
// not being deleted (what a PodDisruptionBudget counts as healthy), and the
// fewest seen.
type PodWitness struct {
	mu   sync.Mutex
	pods map[string]kubeObject
	Min  int
}

func (w *PodWitness) on(typ string, o kubeObject) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if typ == "DELETED" {
		delete(w.pods, o.Metadata.UID)
	} else {
		w.pods[o.Metadata.UID] = o
	}
	if n := w.readyLocked(); w.Min < 0 || n < w.Min {
		w.Min = n
	}
}

func (w *PodWitness) reset(items []kubeObject) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pods = map[string]kubeObject{}
	for _, o := range items {
		w.pods[o.Metadata.UID] = o
	}
	if n := w.readyLocked(); w.Min < 0 || n < w.Min {
		w.Min = n
	}
}

func (w *PodWitness) readyLocked() int {
	n := 0
	for _, p := range w.pods {
		if p.Metadata.DeletionTimestamp == nil && p.condition("Ready") == "True" {
			n++
		}
	}
	return n
}

// Ready is the number of pods Ready and not being deleted now.
func (w *PodWitness) Ready() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.readyLocked()
}

// ResetMin starts a new minimum from now.
func (w *PodWitness) ResetMin() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.Min = w.readyLocked()
}

// Minimum is the fewest Ready pods seen since the last ResetMin.
func (w *PodWitness) Minimum() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.Min
}

// WatchPods starts a PodWitness of selector in namespace default.
func (k *KubeCluster) WatchPods(ctx context.Context, wg *sync.WaitGroup, selector string) *PodWitness {
	w := &PodWitness{pods: map[string]kubeObject{}, Min: -1}
	k.kubeWatch(ctx, wg, w.reset, w.on, "/api/v1/namespaces/default/pods?labelSelector="+url.QueryEscape(selector))
	return w
}

// NodeWitness follows the Nodes: when each was cordoned and deleted, and
// which pods were still bound to it when it went.
type NodeWitness struct {
	mu       sync.Mutex
	k        *KubeCluster
	selector string
	Cordoned map[string]time.Time
	Deleted  map[string]time.Time
	// Stranded are the pods still bound to a Node when its deletion was
	// seen: a drain evicts them first.
	Stranded map[string][]string
}

func (w *NodeWitness) on(typ string, o kubeObject) {
	name := o.Metadata.Name
	var left []string
	if typ == "DELETED" {
		// Asked of the API server, not of a witness: the pods that
		// still exist bound to the Node just deleted.
		out, err := w.k.Kubectl("get", "pods", "-n", "default", "-l", w.selector, "--field-selector", "spec.nodeName="+name, "-o", "name")
		if err == nil {
			left = strings.Fields(out)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if o.Spec.Unschedulable {
		if _, ok := w.Cordoned[name]; !ok {
			w.Cordoned[name] = time.Now()
		}
	}
	if typ == "DELETED" {
		w.Deleted[name] = time.Now()
		if len(left) > 0 {
			w.Stranded[name] = left
		}
	}
}

// Drains are, per Node cordoned and deleted so far, the time from cordon
// to deletion.
func (w *NodeWitness) Drains() map[string]time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]time.Duration{}
	for n, d := range w.Deleted {
		if c, ok := w.Cordoned[n]; ok {
			out[n] = d.Sub(c)
		}
	}
	return out
}

// SawDeleted reports whether the witness saw Node name deleted.
func (w *NodeWitness) SawDeleted(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.Deleted[name]
	return ok
}

// DeletedCount is how many Nodes the witness saw deleted.
func (w *NodeWitness) DeletedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.Deleted)
}

// StrandedPods are the Nodes deleted with pods still bound to them.
func (w *NodeWitness) StrandedPods() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]string{}
	for n, p := range w.Stranded {
		out[n] = p
	}
	return out
}

// WatchNodes starts a NodeWitness whose stranded pods are those of
// selector in namespace default.
func (k *KubeCluster) WatchNodes(ctx context.Context, wg *sync.WaitGroup, selector string) *NodeWitness {
	w := &NodeWitness{k: k, selector: selector, Cordoned: map[string]time.Time{}, Deleted: map[string]time.Time{}, Stranded: map[string][]string{}}
	known := map[string]kubeObject{}
	k.kubeWatch(ctx, wg, func(items []kubeObject) {
		// A list after a lost watch: a Node known before and absent now
		// was deleted meanwhile.
		now := map[string]bool{}
		for _, o := range items {
			now[o.Metadata.Name] = true
			known[o.Metadata.Name] = o
			w.on("ADDED", o)
		}
		for name, o := range known {
			if !now[name] {
				delete(known, name)
				w.on("DELETED", o)
			}
		}
	}, func(typ string, o kubeObject) {
		if typ == "DELETED" {
			delete(known, o.Metadata.Name)
		} else {
			known[o.Metadata.Name] = o
		}
		w.on(typ, o)
	}, "/api/v1/nodes")
	return w
}

// APIWitness reads one object through the cluster's endpoint every
// 100 ms, with the kubeconfig's credentials: a client of the workload
// cluster during its upgrade.
type APIWitness struct {
	mu                   sync.Mutex
	Requests, Errors     int
	LongestGap           time.Duration
	lastOK, started      time.Time
	firstErr, lastErrMsg string
}

// Report is the witness's figures.
func (w *APIWitness) Report() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	gap := w.LongestGap
	if !w.lastOK.IsZero() && time.Since(w.lastOK) > gap {
		gap = time.Since(w.lastOK)
	}
	s := fmt.Sprintf("%d requests, %d errors, longest time without an answer %.1fs", w.Requests, w.Errors, gap.Seconds())
	if w.firstErr != "" {
		s += fmt.Sprintf(" (first error: %s; last: %s)", w.firstErr, w.lastErrMsg)
	}
	return s
}

// Gap is the longest time without a successful answer so far.
func (w *APIWitness) Gap() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.LongestGap
}

// kubeconfigClient is an HTTP client with the kubeconfig's CA and client
// certificate, and its server URL.
func (k *KubeCluster) kubeconfigClient() (*http.Client, string) {
	k.T.Helper()
	out, err := k.Kubectl("config", "view", "--raw", "--minify", "-o", "json")
	if err != nil {
		k.T.Fatal(err)
	}
	var cfg struct {
		Clusters []struct {
			Cluster map[string]string `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User map[string]string `json:"user"`
		} `json:"users"`
	}
	if err := json.Unmarshal([]byte(out), &cfg); err != nil || len(cfg.Clusters) != 1 || len(cfg.Users) != 1 {
		k.T.Fatalf("kubectl config view: %v\n%s", err, out)
	}
	dec := func(m map[string]string, key string) []byte {
		b, err := base64.StdEncoding.DecodeString(m[key])
		if err != nil || len(b) == 0 {
			k.T.Fatalf("kubeconfig %s: %v", key, err)
		}
		return b
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(dec(cfg.Clusters[0].Cluster, "certificate-authority-data"))
	cert, err := tls.X509KeyPair(dec(cfg.Users[0].User, "client-certificate-data"), dec(cfg.Users[0].User, "client-key-data"))
	if err != nil {
		k.T.Fatal(err)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	return &http.Client{Transport: tr, Timeout: 2 * time.Second}, cfg.Clusters[0].Cluster["server"]
}

// WatchAPI starts an APIWitness reading path.
func (k *KubeCluster) WatchAPI(ctx context.Context, wg *sync.WaitGroup, path string) *APIWitness {
	client, server := k.kubeconfigClient()
	w := &APIWitness{started: time.Now(), lastOK: time.Now()}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				client.CloseIdleConnections()
				return
			case <-tick.C:
			}
			err := get(ctx, client, server+path)
			w.mu.Lock()
			w.Requests++
			now := time.Now()
			if err == nil {
				if gap := now.Sub(w.lastOK); gap > w.LongestGap {
					w.LongestGap = gap
				}
				w.lastOK = now
			} else if ctx.Err() == nil {
				w.Errors++
				if w.firstErr == "" {
					w.firstErr = err.Error()
				}
				w.lastErrMsg = err.Error()
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func get(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// EtcdWitness asks etcd for its members every 2 s (etcdctl, endpoints from
// the control-plane Nodes): the fewest voting members seen.
type EtcdWitness struct {
	mu                  sync.Mutex
	MinVoters, Samples  int
	Failed              int
	minDetail, lastFail string
}

// Report is the witness's figures.
func (w *EtcdWitness) Report() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := fmt.Sprintf("%d samples, fewest voting members %d (%s), %d samples failed", w.Samples, w.MinVoters, w.minDetail, w.Failed)
	if w.lastFail != "" {
		s += " (last: " + w.lastFail + ")"
	}
	return s
}

// Fewest is the fewest voting members seen.
func (w *EtcdWitness) Fewest() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.MinVoters
}

// WatchEtcd starts an EtcdWitness; pki holds ca.crt and the etcd client
// certificate (etcdPKI).
func (k *KubeCluster) WatchEtcd(ctx context.Context, wg *sync.WaitGroup, pki string) *EtcdWitness {
	w := &EtcdWitness{MinVoters: -1}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
			voters, detail, err := k.etcdVoters(pki)
			w.mu.Lock()
			if ctx.Err() == nil {
				w.Samples++
				if err != nil {
					w.Failed++
					w.lastFail = err.Error()
				} else if w.MinVoters < 0 || voters < w.MinVoters {
					w.MinVoters, w.minDetail = voters, detail
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// etcdPKI copies the etcd CA and the API server's etcd client certificate
// from a control-plane machine's disk into a directory: they outlive that
// machine (every member is signed by the cluster's etcd CA).
func (k *KubeCluster) etcdPKI(cp string, readFile func(machine, path string) ([]byte, bool)) string {
	k.T.Helper()
	dir := k.T.TempDir()
	for _, f := range []string{"etcd/ca.crt", "apiserver-etcd-client.crt", "apiserver-etcd-client.key"} {
		b, ok := readFile(cp, "/etc/kubernetes/pki/"+f)
		if !ok {
			k.T.Fatalf("no /etc/kubernetes/pki/%s on %s", f, cp)
		}
		k.Write(filepath.Join(dir, filepath.Base(f)), string(b))
	}
	return dir
}

// etcdVoters counts etcd's started voting members.
func (k *KubeCluster) etcdVoters(pki string) (int, string, error) {
	out, err := k.Kubectl("get", "nodes", "-l", "node-role.kubernetes.io/control-plane", "-o", "json")
	if err != nil {
		return 0, "", err
	}
	var l kubeNodes
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return 0, "", err
	}
	var endpoints []string
	for _, n := range l.Items {
		if u := n.Metadata.Annotations[etcdClientURLsAnnotation]; u != "" {
			endpoints = append(endpoints, u)
		}
	}
	if len(endpoints) == 0 {
		return 0, "", fmt.Errorf("no control-plane Node carries %s", etcdClientURLsAnnotation)
	}
	out, err = k.Run("etcdctl", "--endpoints="+strings.Join(endpoints, ","), "--command-timeout=5s", "--dial-timeout=2s",
		"--cacert="+filepath.Join(pki, "ca.crt"), "--cert="+filepath.Join(pki, "apiserver-etcd-client.crt"), "--key="+filepath.Join(pki, "apiserver-etcd-client.key"),
		"member", "list", "-w", "json")
	if err != nil {
		return 0, "", err
	}
	var ml struct {
		Members []struct {
			Name      string `json:"name"`
			IsLearner bool   `json:"isLearner"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(out), &ml); err != nil {
		return 0, "", fmt.Errorf("etcdctl member list: %v", err)
	}
	var names []string
	voters := 0
	for _, m := range ml.Members {
		switch {
		case m.IsLearner:
			names = append(names, m.Name+"[learner]")
		case m.Name == "":
			names = append(names, "(unstarted)")
		default:
			voters++
			names = append(names, m.Name)
		}
	}
	sort.Strings(names)
	return voters, strings.Join(names, ","), nil
}
