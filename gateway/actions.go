package gateway

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// The convenience endpoints change one thing of a stored cluster through the
// same compare-and-set write as apply, and validate the result the same way
// (ValidateUpdate), so they can never store what apply would refuse. Each
// takes an optional resourceVersion in its body; each answers 200 with the
// cluster.

// scaleCluster is POST /v1/clusters/{name}/scale {pool, replicas}.
func (s *server) scaleCluster(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	var req api.ScaleRequest
	if err := readJSON(r, &req, false); err != nil {
		return err
	}
	switch {
	case req.Pool == "":
		return badRequest("pool is required").withField("pool", `required: a worker pool's name, or "control-plane"`, nil)
	case req.Replicas == nil:
		return badRequest("replicas is required").withField("replicas", "required", nil)
	}
	n := *req.Replicas
	return s.change(w, r, name, req.ResourceVersion, false, func(cur, next *capnv1.Cluster) (*capnv1.Cluster, error) {
		spec := ensure(&next.Spec)
		if req.Pool == api.ControlPlanePool {
			if spec.ControlPlane == nil {
				return nil, unprocessable("cluster %s has no control plane to scale", name).withField("pool", "no control plane", req.Pool)
			}
			spec.ControlPlane.Replicas = n
		} else {
			pool := findPool(spec, req.Pool)
			if pool == nil {
				return nil, unprocessable("cluster %s has no worker pool %s", name, req.Pool).
					withField("pool", "no such worker pool; the cluster has "+poolNames(spec), req.Pool)
			}
			pool.Replicas = n
		}
		return next, s.validate(cur, next, fmt.Sprintf("cannot scale %s of cluster %s to %d", req.Pool, name, n))
	})
}

// upgradeCluster is POST /v1/clusters/{name}/upgrade {version}: the control
// plane's version, and every worker pool's that ran the control plane's old
// version (unless controlPlaneOnly). ValidateUpdate refuses a downgrade, a
// major change and a skipped minor version.
func (s *server) upgradeCluster(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	var req api.UpgradeRequest
	if err := readJSON(r, &req, false); err != nil {
		return err
	}
	if req.Version == "" {
		return badRequest("version is required").withField("version", "required: a Kubernetes version such as v1.35.0", nil)
	}
	if _, err := manifest.ParseVersion(req.Version); err != nil {
		// One error on the field the caller wrote, before it is copied to
		// spec.kubernetesVersion and the pools that follow it.
		return badRequest("version %q is not a Kubernetes version", req.Version).
			withField("version", "must be vMAJOR.MINOR.PATCH, e.g. v1.35.0", req.Version)
	}
	if req.RespectWindow && req.ControlPlaneOnly {
		return badRequest("respectWindow and controlPlaneOnly do not go together").
			withField("controlPlaneOnly", "not with respectWindow: the window's upgrade moves the pools that follow the control plane", true)
	}
	return s.change(w, r, name, req.ResourceVersion, false, func(cur, next *capnv1.Cluster) (*capnv1.Cluster, error) {
		if t := cur.GetSpec().GetTopology(); t != nil {
			// Its version is its class revision's: an upgrade here would
			// be undone by the next apply.
			return nil, unprocessableField("version", req.Version, fmt.Sprintf(
				"cluster %s takes its Kubernetes version from class %s revision %d: apply a class revision with the new version and roll it out (capn rollout)",
				name, t.GetClass(), t.GetRevision()))
		}
		spec := ensure(&next.Spec)
		old := spec.KubernetesVersion
		if req.RespectWindow {
			// The wish, validated as the upgrade itself would be; the
			// maintenance service makes it in the next window.
			ensure(&spec.Maintenance).PendingVersion = req.Version
			return next, s.validate(cur, next, fmt.Sprintf("cannot record an upgrade of cluster %s from %s to %s for its maintenance window", name, old, req.Version))
		}
		spec.KubernetesVersion = req.Version
		// The user's explicit upgrade: the planner rolls it at once even
		// when spec.maintenance.confineSpecRollouts holds rollouts for
		// the window.
		md := ensure(&next.Metadata)
		if md.Annotations == nil {
			md.Annotations = map[string]string{}
		}
		md.Annotations[annotations.UpgradeAtOnce] = req.Version
		if !req.ControlPlaneOnly {
			for _, p := range spec.WorkerPools {
				if p != nil && (p.Version == "" || p.Version == old) {
					p.Version = req.Version
				}
			}
		}
		return next, s.validate(cur, next, fmt.Sprintf("cannot upgrade cluster %s from %s to %s", name, old, req.Version))
	})
}

// pauseCluster is POST /v1/clusters/{name}/pause: spec.paused true. Allowed
// while the cluster is being deleted (pause stops the teardown too).
func (s *server) pauseCluster(w http.ResponseWriter, r *http.Request) error {
	return s.setFlag(w, r, true, func(sp *capnv1.ClusterSpec) { sp.Paused = true })
}

// resumeCluster is POST /v1/clusters/{name}/resume: spec.paused false.
func (s *server) resumeCluster(w http.ResponseWriter, r *http.Request) error {
	return s.setFlag(w, r, true, func(sp *capnv1.ClusterSpec) { sp.Paused = false })
}

// hibernateCluster is POST /v1/clusters/{name}/hibernate: spec.hibernated
// true. capn stops every machine whose provider can stop (same machines,
// same disks) and creates or deletes none until the cluster wakes.
func (s *server) hibernateCluster(w http.ResponseWriter, r *http.Request) error {
	return s.setFlag(w, r, false, func(sp *capnv1.ClusterSpec) { sp.Hibernated = true })
}

// wakeCluster is POST /v1/clusters/{name}/wake: spec.hibernated false.
func (s *server) wakeCluster(w http.ResponseWriter, r *http.Request) error {
	return s.setFlag(w, r, false, func(sp *capnv1.ClusterSpec) { sp.Hibernated = false })
}

// setFlag is the pause, resume, hibernate and wake actions: an optional
// body with a resourceVersion precondition, and set on the spec.
func (s *server) setFlag(w http.ResponseWriter, r *http.Request, whileDeleting bool, set func(*capnv1.ClusterSpec)) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	var req api.PauseRequest
	if err := readJSON(r, &req, true); err != nil {
		return err
	}
	return s.change(w, r, name, req.ResourceVersion, whileDeleting, func(_, next *capnv1.Cluster) (*capnv1.Cluster, error) {
		set(ensure(&next.Spec))
		return next, nil
	})
}

// change applies mutate to an existing cluster and answers 200 with it
// (with ?dryRun=All: with what would be stored, writing nothing).
func (s *server) change(w http.ResponseWriter, r *http.Request, name, rv string, whileDeleting bool,
	mutate func(cur, next *capnv1.Cluster) (*capnv1.Cluster, error)) error {
	dryRun, err := dryRunFrom(r)
	if err != nil {
		return err
	}
	res, err := s.writeCluster(r.Context(), writeOp{
		name: name, precondition: rv, preconditionPath: "resourceVersion",
		whileDeleting: whileDeleting, mutate: mutate, dryRun: dryRun,
	})
	if err != nil {
		return err
	}
	return s.respondCluster(r.Context(), w, http.StatusOK, res.cluster, res.rev)
}

func unprocessable(format string, args ...any) *problemError {
	return problem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid change", format, args...)
}

func findPool(spec *capnv1.ClusterSpec, name string) *capnv1.WorkerPool {
	for _, p := range spec.GetWorkerPools() {
		if p.GetName() == name {
			return p
		}
	}
	return nil
}

// poolNames lists the pools a ScaleRequest may name.
func poolNames(spec *capnv1.ClusterSpec) string {
	names := []string{api.ControlPlanePool}
	for _, p := range spec.GetWorkerPools() {
		names = append(names, p.GetName())
	}
	return strings.Join(names, ", ")
}
