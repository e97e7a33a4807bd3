package gateway

import (
	"errors"
	"net/http"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// getKubeconfig is GET /v1/clusters/{name}/kubeconfig (scope secrets): the
// cluster's admin kubeconfig as YAML, opened from the bootstrapper's sealed
// secrets (key kubeconfig.<name>) with the gateway's secrets key. 404
// not-yet-available while the bootstrapper has not made it (it needs the
// control-plane endpoint); 404 not-found naming the registered kubeconfig
// for a cluster with an external control plane (capn makes none for it);
// 503 when the gateway was started without the key.
func (s *server) getKubeconfig(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	ctx := r.Context()
	c, _, err := s.clusters.Get(ctx, keys.Cluster(name))
	if errors.Is(err, store.ErrNotFound) {
		return notFound("cluster %s not found", name)
	} else if err != nil {
		return err
	}
	if cp := c.GetSpec().GetControlPlane(); cp.Implementation() == capnv1.ControlPlaneExternal {
		// Never made, not "not yet": capn's CA did not sign that API server.
		return notFound("cluster %s has an external control plane: capn hands out no kubeconfig for it; use the kubeconfig registered as %s (spec.controlPlane.external.kubeconfig), the one capn uses",
			name, cp.GetExternal().GetKubeconfig())
	}
	if s.kubeconfigs == nil {
		p := problem(http.StatusServiceUnavailable, api.ProblemUnavailable, "Secrets unavailable",
			"this gateway was started without the secrets key (--secrets-key-file or CAPN_SECRETS_KEY), so it cannot open kubeconfigs")
		return p
	}
	kc, _, err := s.kubeconfigs.Get(ctx, keys.Kubeconfig(name))
	if errors.Is(err, store.ErrNotFound) {
		p := problem(http.StatusNotFound, api.ProblemNotYetAvailable, "Not yet available",
			"not yet available: waiting for the control-plane endpoint of cluster %s", name)
		if st, _, err := s.secretsStatuses.Get(ctx, keys.Secrets(name)); err == nil && st.GetMessage() != "" {
			p.Detail += " (" + st.GetMessage() + ")"
		}
		return p
	}
	if err != nil {
		return err // a key that does not open it is logged, answered 500
	}
	w.Header().Set("Content-Type", api.MediaYAML)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.kubeconfig"`)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(kc.GetKubeconfig())
	return nil
}
