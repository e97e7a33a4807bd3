package backup

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// kubeLocalCluster reads a cluster whose control plane capn runs (the
// kube-local bootstrap provider, whose node agents hold etcd and the
// certificates) and the names of its machines not being deleted, control
// planes and workers each sorted. keyFor says what the key is needed for
// and needs what the operation needs ("etcd snapshots need"), for the
// refusals: no key, a bad name, no such cluster, another bootstrap
// provider, no control-plane machine.
func (s *Service) kubeLocalCluster(ctx context.Context, cluster, keyFor, needs string) (c *capnv1.Cluster, cps, workers []string, _ *capnv1.BackupError) {
	if s.cfg.Keyring == nil {
		return nil, nil, nil, refuse(CodeUnavailable, "the backup service has no key "+keyFor+": give it --secrets-key-file (or CAPN_SECRETS_KEY), the key of the secrets bucket")
	}
	if err := checkClusterName(cluster); err != nil {
		return nil, nil, nil, refuse(CodeInvalid, fmt.Sprintf("cluster %q: %v", cluster, err))
	}
	c, _, err := s.clusters.Get(ctx, keys.Cluster(cluster))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, nil, refuse(CodeNotFound, "no cluster "+cluster)
	}
	if err != nil {
		return nil, nil, nil, refuse(CodeInternal, err.Error())
	}
	if p := c.GetSpec().GetBootstrap().GetProvider(); p != KubeLocal {
		if p == "" {
			p = "kubeadm"
		}
		return nil, nil, nil, refuse(CodeInvalid, fmt.Sprintf("cluster %s: its control plane is not run by capn (bootstrap provider %s): %s the %s bootstrap provider", cluster, p, needs, KubeLocal))
	}
	ms, err := s.machines.List(ctx, keys.MachinesOf(cluster))
	if err != nil {
		return nil, nil, nil, refuse(CodeInternal, err.Error())
	}
	for _, m := range ms {
		k, err := keys.Parse(m.Key)
		if err != nil || m.Value.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		if m.Value.GetSpec().GetRole() == "control-plane" {
			cps = append(cps, k.Name)
		} else {
			workers = append(workers, k.Name)
		}
	}
	slices.Sort(cps)
	slices.Sort(workers)
	if len(cps) == 0 {
		return nil, nil, nil, refuse(CodeUnavailable, "cluster "+cluster+" has no control-plane machine")
	}
	return c, cps, workers, nil
}
