package autoscalerprovider

import (
	"fmt"
	"runtime"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/nodecapacity"
)

// templateNode is the Node a new machine of pool p of cluster would
// register (NodeGroupTemplateNodeInfo), so that the autoscaler can scale a
// pool up from zero: the capacity and allocatable of the template's cpu,
// memory and pods parameters (nodecapacity, whose defaults kwok reports
// too), the pool's labels beside the ones every capn Node has (capn-node's
// NodeFor: hostname, os, arch), its taints, and Ready.
func templateNode(cluster string, p *capnv1.WorkerPool) (*corev1.Node, error) {
	capacity, err := nodecapacity.FromParameters(p.GetTemplate().GetParameters())
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", p.GetName(), err)
	}
	rl := corev1.ResourceList{}
	for name, q := range capacity {
		rl[corev1.ResourceName(name)] = resource.MustParse(q)
	}
	name := fmt.Sprintf("%s-%s-template", cluster, p.GetName())
	labels := map[string]string{
		"kubernetes.io/hostname":  name,
		"kubernetes.io/os":        "linux",
		"kubernetes.io/arch":      runtime.GOARCH,
		"beta.kubernetes.io/os":   "linux",
		"beta.kubernetes.io/arch": runtime.GOARCH,
	}
	for k, v := range p.GetLabels() {
		labels[k] = v
	}
	n := &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Status: corev1.NodeStatus{
			Capacity: rl, Allocatable: rl.DeepCopy(),
			Phase:      corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
			NodeInfo:   corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: runtime.GOARCH, KubeletVersion: p.GetVersion()},
		},
	}
	for _, t := range p.GetTaints() {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: t.GetKey(), Value: t.GetValue(), Effect: corev1.TaintEffect(t.GetEffect())})
	}
	return n, nil
}
