package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// What draining a Node takes (kubectl drain's, as Cluster API drains):
// cordon it, list its pods, evict them through the Eviction API — which
// refuses (429) an eviction a PodDisruptionBudget does not allow — and
// find the budget that refused.

// MirrorPodAnnotation marks a static pod's mirror in the API: the kubelet
// owns it, an eviction would do nothing.
const MirrorPodAnnotation = "kubernetes.io/config.mirror"

// Pod is what a drain needs to know of a pod.
type Pod struct {
	Namespace, Name, UID string
	Labels               map[string]string
	// Phase is status.phase (Pending, Running, Succeeded, Failed).
	Phase string
	// Terminating: metadata.deletionTimestamp is set.
	Terminating bool
	// DaemonSet: a DaemonSet controls it (it would be recreated on the
	// Node at once).
	DaemonSet bool
	// Mirror: a static pod's mirror (MirrorPodAnnotation).
	Mirror bool
}

// String is namespace/name.
func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// Cordon marks node unschedulable (spec.unschedulable, as kubectl cordon).
// Cordoning a cordoned Node changes nothing.
func (c *Client) Cordon(ctx context.Context, node string) error {
	err := c.MergePatch(ctx, "/api/v1/nodes/"+url.PathEscape(node), map[string]any{"spec": map[string]any{"unschedulable": true}})
	if err != nil {
		return fmt.Errorf("cordon Node %s: %w", node, err)
	}
	return nil
}

// ListPodsOnNode lists the pods bound to node, in every namespace
// (fieldSelector spec.nodeName).
func (c *Client) ListPodsOnNode(ctx context.Context, node string) ([]Pod, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Namespace         string            `json:"namespace"`
				Name              string            `json:"name"`
				UID               string            `json:"uid"`
				Labels            map[string]string `json:"labels"`
				Annotations       map[string]string `json:"annotations"`
				DeletionTimestamp *time.Time        `json:"deletionTimestamp"`
				OwnerReferences   []struct {
					Kind       string `json:"kind"`
					Controller bool   `json:"controller"`
				} `json:"ownerReferences"`
			} `json:"metadata"`
			Status struct {
				Phase string `json:"phase"`
			} `json:"status"`
		} `json:"items"`
	}
	q := url.Values{"fieldSelector": {"spec.nodeName=" + node}}
	if err := c.Get(ctx, "/api/v1/pods?"+q.Encode(), &list); err != nil {
		return nil, fmt.Errorf("list pods on Node %s: %w", node, err)
	}
	out := make([]Pod, 0, len(list.Items))
	for _, it := range list.Items {
		m := it.Metadata
		p := Pod{Namespace: m.Namespace, Name: m.Name, UID: m.UID, Labels: m.Labels, Phase: it.Status.Phase,
			Terminating: m.DeletionTimestamp != nil}
		_, p.Mirror = m.Annotations[MirrorPodAnnotation]
		p.DaemonSet = slices.ContainsFunc(m.OwnerReferences, func(o struct {
			Kind       string `json:"kind"`
			Controller bool   `json:"controller"`
		}) bool {
			return o.Kind == "DaemonSet" && o.Controller
		})
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Pod) int {
		if a.Namespace != b.Namespace {
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		}
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, nil
}

// ErrEvictionBlocked: the API refused an eviction with 429 Too Many
// Requests — a PodDisruptionBudget does not allow it now (or the pod is
// selected by more than one budget). Retry later; never delete instead.
var ErrEvictionBlocked = errors.New("eviction blocked by a PodDisruptionBudget")

// EvictionBlocked is the 429 answer to an eviction: the API's message
// (which names the budget: "Cannot evict pod as it would violate the
// pod's disruption budget.", with the budget's name in its details
// since Kubernetes 1.26) and the budget's name when it says it.
type EvictionBlocked struct {
	Pod     Pod
	Message string
	// Budget is the PodDisruptionBudget the API named ("" when it did not).
	Budget string
}

func (e *EvictionBlocked) Error() string {
	return fmt.Sprintf("evict pod %s: %s", e.Pod, e.Message)
}

func (e *EvictionBlocked) Is(target error) bool { return target == ErrEvictionBlocked }

// Evict asks the Eviction API (policy/v1) to evict p. A pod already gone
// (404) is evicted. A 429 is an *EvictionBlocked (errors.Is
// ErrEvictionBlocked).
func (c *Client) Evict(ctx context.Context, p Pod) error {
	body := map[string]any{
		"apiVersion": "policy/v1", "kind": "Eviction",
		"metadata": map[string]any{"name": p.Name, "namespace": p.Namespace},
	}
	if p.UID != "" {
		// Only the pod that was listed: one recreated under its name since
		// is not evicted on this pass.
		body["deleteOptions"] = map[string]any{"preconditions": map[string]any{"uid": p.UID}}
	}
	path := "/api/v1/namespaces/" + url.PathEscape(p.Namespace) + "/pods/" + url.PathEscape(p.Name) + "/eviction"
	err := c.Do(ctx, http.MethodPost, path, "application/json", body, nil)
	var se *StatusError
	switch {
	case err == nil, IsStatus(err, http.StatusNotFound), IsStatus(err, http.StatusConflict):
		return nil
	case errors.As(err, &se) && se.Code == http.StatusTooManyRequests:
		cause := se.Cause("DisruptionBudget")
		msg := se.Message
		if cause != "" {
			msg += " " + cause
		}
		return &EvictionBlocked{Pod: p, Message: msg, Budget: budgetNamed(cause)}
	}
	return fmt.Errorf("evict pod %s: %w", p, err)
}

// budgetNamed is the budget's name in the API's DisruptionBudget cause
// ("The disruption budget web-pdb needs 5 healthy pods and has 5
// currently"), "" if it names none.
func budgetNamed(cause string) string {
	rest, ok := strings.CutPrefix(cause, "The disruption budget ")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, " ")
	return name
}

// PDB is a PodDisruptionBudget as a drain reads it.
type PDB struct {
	Namespace, Name string
	// Selector is spec.selector; nil selects no pod (policy/v1).
	Selector *LabelSelector
	// DisruptionsAllowed is status.disruptionsAllowed (computed by
	// kube-controller-manager's disruption controller).
	DisruptionsAllowed int32
}

// LabelSelector is a metav1.LabelSelector.
type LabelSelector struct {
	MatchLabels      map[string]string `json:"matchLabels"`
	MatchExpressions []struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	} `json:"matchExpressions"`
}

// Selects reports whether the budget covers a pod with labels: a nil
// selector selects none, an empty one every pod (policy/v1).
func (p PDB) Selects(labels map[string]string) bool {
	return p.Selector != nil && p.Selector.Matches(labels)
}

// Matches reports whether labels satisfy the selector; an empty selector
// matches everything.
func (s LabelSelector) Matches(labels map[string]string) bool {
	for k, v := range s.MatchLabels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for _, e := range s.MatchExpressions {
		v, ok := labels[e.Key]
		switch e.Operator {
		case "In":
			if !ok || !slices.Contains(e.Values, v) {
				return false
			}
		case "NotIn":
			if ok && slices.Contains(e.Values, v) {
				return false
			}
		case "Exists":
			if !ok {
				return false
			}
		case "DoesNotExist":
			if ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// ListPDBs lists the PodDisruptionBudgets of namespace, by name.
func (c *Client) ListPDBs(ctx context.Context, namespace string) ([]PDB, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Selector *LabelSelector `json:"selector"`
			} `json:"spec"`
			Status struct {
				DisruptionsAllowed int32 `json:"disruptionsAllowed"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := c.Get(ctx, "/apis/policy/v1/namespaces/"+url.PathEscape(namespace)+"/poddisruptionbudgets", &list); err != nil {
		return nil, fmt.Errorf("list PodDisruptionBudgets of %s: %w", namespace, err)
	}
	out := make([]PDB, 0, len(list.Items))
	for _, it := range list.Items {
		p := PDB{Namespace: it.Metadata.Namespace, Name: it.Metadata.Name, DisruptionsAllowed: it.Status.DisruptionsAllowed}
		p.Selector = it.Spec.Selector
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b PDB) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}
