package autoscalerprovider

import (
	"context"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/autoscalertls"
)

// autoscaledClusters are the clusters of the desired cache with an
// autoscaled pool.
func (s *Service) autoscaledClusters() []string {
	view := store.NewView(s.desired, store.New[capnv1.Cluster]())
	var out []string
	for _, name := range s.desired.KeysUnder(keys.ClusterPrefix) {
		c, _, ok := view.Get(keys.Cluster(name))
		if ok && len(groupsOf(c)) > 0 {
			out = append(out, name)
		}
	}
	return out
}

// waitForAutoscaling returns true once a cluster has an autoscaled pool,
// false when ctx ends first.
func (s *Service) waitForAutoscaling(ctx context.Context) bool {
	sub := s.desired.Subscribe(keys.ClusterPrefix)
	defer sub.Unsubscribe()
	for {
		if len(s.autoscaledClusters()) > 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case _, ok := <-sub.C():
			if !ok {
				return false
			}
		}
	}
}

// issueClients writes the client certificate and cloud config of every
// cluster with an autoscaled pool into ClientsDir, as clusters come.
func (s *Service) issueClients(ctx context.Context, addr string) {
	done := map[string]bool{}
	s.desired.Subscribe(keys.ClusterPrefix).Each(ctx, func(store.Change) {
		for _, name := range s.autoscaledClusters() {
			if done[name] {
				continue
			}
			c, err := autoscalertls.IssueClient(s.cfg.ClientsDir, name, addr, s.cfg.Now())
			if err != nil {
				s.log.Warn().Err(err).Str("cluster", name).Msg("no autoscaler client configuration written")
				continue
			}
			done[name] = true
			s.log.Info().Str("cluster", name).Str("cloud_config", c.CloudConfig).
				Msg("cluster autoscaler configuration written: cluster-autoscaler --cloud-provider=externalgrpc --cloud-config=" + c.CloudConfig)
		}
	})
}
