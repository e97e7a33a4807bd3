package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

func resourceVersion(rev uint64) string              { return strconv.FormatUint(rev, 10) }
func cloneCluster(c *capnv1.Cluster) *capnv1.Cluster { return proto.Clone(c).(*capnv1.Cluster) }

// ensure returns *p, first setting it to a new T if it is nil.
func ensure[T any](p **T) *T {
	if *p == nil {
		*p = new(T)
	}
	return *p
}

// clusterObject is what the API shows of a cluster: the desired Cluster read
// at revision rev (its resourceVersion) with the observed status merged in.
// A cluster the cluster-planner has not looked at yet (no observed status)
// shows phase Pending, or Deleting once its deletion is requested, and no
// observedGeneration: no generation of it was observed. c is not modified.
func clusterObject(c *capnv1.Cluster, rev uint64, st *capnv1.ClusterStatus) *capnv1.Cluster {
	out := cloneCluster(c)
	if out.ApiVersion == "" {
		out.ApiVersion = manifest.APIVersion
	}
	if out.Kind == "" {
		out.Kind = manifest.KindCluster
	}
	if rev > 0 {
		ensure(&out.Metadata).ResourceVersion = resourceVersion(rev)
	}
	out.Status = st
	if st == nil {
		out.Status = &capnv1.ClusterStatus{Phase: capnv1.ClusterPending.Wire()}
		if out.GetMetadata().GetDeletionTimestamp() != nil {
			out.Status.SetPhaseValue(capnv1.ClusterDeleting)
		}
	}
	return out
}

// machineObject is what the API shows of a machine: the desired Machine (nil
// when only its status is left, e.g. while its infrastructure is deleted)
// read at rev, with the observed status merged in. A machine the
// machine-manager has not written yet — it writes nothing while a new
// machine waits for its bootstrap data — shows phase Pending, as a cluster
// without a status does.
func machineObject(name string, m *capnv1.Machine, rev uint64, st *capnv1.MachineStatus) *capnv1.Machine {
	out := &capnv1.Machine{}
	if m != nil {
		out = proto.Clone(m).(*capnv1.Machine)
	}
	md := ensure(&out.Metadata)
	if md.Name == "" {
		md.Name = name
	}
	if rev > 0 {
		md.ResourceVersion = resourceVersion(rev)
	}
	out.Status = st
	if st == nil && m != nil && m.GetMetadata().GetDeletionTimestamp() == nil {
		out.Status = &capnv1.MachineStatus{Phase: capnv1.MachinePending.Wire()}
	}
	return out
}

// marshalObject encodes a resource as protojson.
func marshalObject(m proto.Message) (json.RawMessage, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", m, err)
	}
	return b, nil
}

// listOf encodes a Kubernetes-style list.
func listOf[T proto.Message](kind string, items []T) (*api.List, error) {
	l := &api.List{APIVersion: api.APIVersion, Kind: kind, Items: make([]json.RawMessage, 0, len(items))}
	for _, it := range items {
		b, err := marshalObject(it)
		if err != nil {
			return nil, err
		}
		l.Items = append(l.Items, b)
	}
	return l, nil
}

// selectorFrom parses ?labelSelector= (Kubernetes syntax: a=b, a!=b, a,
// !a, a in (x,y), a notin (x,y), joined by commas). An empty selector
// matches everything.
func selectorFrom(r *http.Request) (labels.Selector, error) {
	s := r.URL.Query().Get("labelSelector")
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, badRequest("labelSelector is not valid").
			withField("labelSelector", strings.TrimPrefix(err.Error(), "unable to parse requirement: "), s)
	}
	return sel, nil
}

func matches(sel labels.Selector, md *capnv1.ObjectMeta) bool {
	return sel.Empty() || sel.Matches(labels.Set(md.GetLabels()))
}

// pathName returns the {name} path value (or another wildcard's), which
// must be a DNS-1123 label: names become KV keys and NATS subject tokens.
func pathName(r *http.Request, wildcard string) (string, error) {
	name := r.PathValue(wildcard)
	return name, checkName(wildcard, name)
}

// checkName refuses a name that is not a DNS-1123 label, as a 400 naming
// the parameter.
func checkName(param, name string) error {
	if manifest.IsDNSLabel(name) {
		return nil
	}
	return badRequest("%s %q is not a valid name", param, name).
		withField(param, "must be a DNS-1123 label: at most 63 characters, lower-case letters, digits and '-', starting and ending with a letter or digit", name)
}
