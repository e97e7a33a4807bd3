package conformance

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// webApp is the kubeadm check's Deployment and Service web (kubeadmWeb)
// on the cluster: the project's web server, whose answer carries token
// (its container's CAPN_WEB_TOKEN) and the answering pod's addresses.
type webApp struct {
	k     *KubeCluster
	token string
}

// webPod is one pod of web.
type webPod struct {
	Name, Node, IP string
	// Serving: Running and Ready, with an address, not terminating.
	Serving, Terminating bool
}

func (p webPod) String() string { return p.Name + "@" + p.Node + "(" + p.IP + ")" }

// pods lists web's pods.
func (w *webApp) pods() ([]webPod, error) {
	out, err := w.k.Kubectl("get", "pods", "-n", "default", "-l", "app=web", "-o", "json")
	if err != nil {
		return nil, err
	}
	var l struct {
		Items []struct {
			Metadata struct {
				Name              string  `json:"name"`
				DeletionTimestamp *string `json:"deletionTimestamp"`
			} `json:"metadata"`
			Spec struct {
				NodeName string `json:"nodeName"`
			} `json:"spec"`
			Status struct {
				Phase      string `json:"phase"`
				PodIP      string `json:"podIP"`
				Conditions []struct {
					Type, Status string
				} `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		return nil, fmt.Errorf("kubectl get pods -o json: %v", err)
	}
	var pods []webPod
	for _, it := range l.Items {
		ready := slices.ContainsFunc(it.Status.Conditions, func(c struct{ Type, Status string }) bool { return c.Type == "Ready" && c.Status == "True" })
		p := webPod{Name: it.Metadata.Name, Node: it.Spec.NodeName, IP: it.Status.PodIP, Terminating: it.Metadata.DeletionTimestamp != nil}
		p.Serving = !p.Terminating && ready && it.Status.Phase == "Running" && p.IP != ""
		pods = append(pods, p)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Node+pods[i].Name < pods[j].Node+pods[j].Name })
	return pods, nil
}

// serving is nil when web has exactly its 3 pods (none other but
// terminating ones), every one serving on a worker of machines, on at
// least minNodes different Nodes; it returns them.
func (w *webApp) serving(machines map[string]KubeMachine, minNodes int) ([]webPod, error) {
	all, err := w.pods()
	if err != nil {
		return nil, err
	}
	var live []webPod
	nodes := map[string]bool{}
	var problems []string
	for _, p := range all {
		if p.Terminating {
			continue
		}
		live = append(live, p)
		if !p.Serving {
			problems = append(problems, p.String()+" not serving")
			continue
		}
		if m, ok := machines[p.Node]; !ok || m.Pool != kubeWorkerPool {
			problems = append(problems, p.String()+" not on a Running worker of "+strings.Join(kubeNames(machines), ", "))
		}
		nodes[p.Node] = true
	}
	if len(live) != 3 {
		problems = append(problems, fmt.Sprintf("%d pods %v, want 3", len(live), live))
	}
	if len(nodes) < minNodes {
		problems = append(problems, fmt.Sprintf("on %d Nodes, want %d or more", len(nodes), minNodes))
	}
	if len(problems) > 0 {
		return live, errors.New(strings.Join(problems, "; "))
	}
	return live, nil
}

// wait waits until serving says web is up, and returns its pods.
func (w *webApp) wait(t *testing.T, what string, timeout time.Duration, machines map[string]KubeMachine, minNodes int) []webPod {
	t.Helper()
	var pods []webPod
	Poll(t, what, timeout, func() (err error) {
		pods, err = w.serving(machines, minNodes)
		return err
	})
	return pods
}

// available is the Deployment's status.availableReplicas.
func (w *webApp) available() (int, error) {
	out, err := w.k.Kubectl("get", "deployment", "web", "-n", "default", "-o", "jsonpath={.status.availableReplicas}")
	if err != nil {
		return 0, err
	}
	if strings.TrimSpace(out) == "" {
		return 0, nil
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// fetch asks pod from to GET target (its ?fetch=, through the API
// server's proxy to the pod, as `kubectl get --raw` does) and returns the
// pod of pods that answered, read from the answer's addresses; an error
// when the answer is not web's (its token) or names none of pods.
func (w *webApp) fetch(from webPod, target string, pods []webPod) (webPod, error) {
	body, err := w.k.Kubectl("get", "--raw", "/api/v1/namespaces/default/pods/"+from.Name+":8080/proxy/?fetch="+url.QueryEscape(target))
	if err != nil {
		return webPod{}, err
	}
	if !strings.Contains(body, "fetched token="+w.token+"\n") {
		return webPod{}, fmt.Errorf("pod %s fetching %s: not the web Deployment's answer:\n%s", from, target, body)
	}
	for _, line := range strings.Split(body, "\n") {
		addr, ok := strings.CutPrefix(line, "fetched addr=")
		if !ok {
			continue
		}
		ip, _, _ := strings.Cut(addr, "/")
		for _, p := range pods {
			if p.IP == ip {
				return p, nil
			}
		}
	}
	return webPod{}, fmt.Errorf("pod %s fetching %s: the answer names none of web's pods %v:\n%s", from, target, pods, body)
}

// checkService: from web's first pod (on one worker), web's Service
// answers through its ClusterIP and through its DNS name, each at least
// once from a pod on another Node — kube-proxy's Service rules and
// CoreDNS on the asking pod's node, pod traffic between the nodes.
func (w *webApp) checkService(t *testing.T, pods []webPod) {
	t.Helper()
	from := pods[0]
	ip, err := w.k.Kubectl("get", "service", "web", "-n", "default", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil || strings.TrimSpace(ip) == "" {
		t.Fatalf("the ClusterIP of Service web: %q %v", ip, err)
	}
	for _, target := range []struct{ what, url string }{
		{"its ClusterIP " + strings.TrimSpace(ip), "http://" + strings.TrimSpace(ip) + "/"},
		{"its DNS name", "http://web.default.svc.cluster.local/"},
	} {
		s0 := time.Now()
		answered := map[string]int{}
		Poll(t, fmt.Sprintf("Service web through %s, from pod %s, answered by a pod on another Node", target.what, from), 3*time.Minute, func() error {
			for range 8 {
				p, err := w.fetch(from, target.url, pods)
				if err != nil {
					return err
				}
				answered[p.String()]++
				if p.Node != from.Node {
					return nil
				}
			}
			return fmt.Errorf("answers only from pods on %s: %v", from.Node, answered)
		})
		t.Logf("from pod %s, Service web answered %s within %.1fs; answers by pod: %v", from, target.url, time.Since(s0).Seconds(), answered)
	}
}
