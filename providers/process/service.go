package process

import (
	"context"
	"errors"
	"fmt"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

// Service is the process provider as a daemon.Service with its own flags
// and validation: what cmd/capn-provider-process and capn dev run. Each
// Run builds a new Provider over the same state dir, as a restarted
// process would; the machines run on.
type Service struct {
	// Process configures the machines; Provider tunes the SDK.
	Process  Options
	Provider sdk.Options
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
	_ daemon.Validator    = (*Service)(nil)
)

// NewService returns the process provider's service.
func NewService(process Options, provider sdk.Options) *Service {
	return &Service{Process: process, Provider: provider}
}

// Name is provider-process.
func (s *Service) Name() string { return sdk.ServiceName(Name) }

// Flags are the --process-* and --provider-* flags.
func (s *Service) Flags() []daemon.Flag {
	return append(s.Process.Flags(), s.Provider.Flags()...)
}

// Validate reports every bad option at once.
func (s *Service) Validate() error {
	return errors.Join(s.Process.Validate(), s.Provider.Validate())
}

// Run runs a new process provider through the SDK until ctx ends. Machines
// connect to Options.NodeNATSURL, by default the URL this service
// connected to.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	opts := s.Process
	if opts.NodeNATSURL == "" {
		opts.NodeNATSURL = d.Config.NATS.URL
	}
	p, err := New(opts)
	if err != nil {
		return err
	}
	kv, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("process: bucket %s: %w", events.BucketObserved, err)
	}
	p.log = d.Log.With().Str("provider", Name).Logger()
	p.secrets = store.NewBucket(kv, store.New[capnv1.ClusterSecretsStatus]())
	if opts.RealNodes {
		p.log.Info().Str("state_dir", opts.StateDir).Str("node_binary", p.opts.NodeBinary).Str("node_nats_url", opts.NodeNATSURL).
			Str("node_stack", p.opts.NodeStack).Str("node_images", p.opts.NodeImages).
			Msg("process provider: machines are real nodes (namespaces, containerd, kubelet, kubeadm)")
	} else {
		p.log.Info().Str("state_dir", opts.StateDir).Str("node_binary", p.opts.NodeBinary).Str("node_nats_url", opts.NodeNATSURL).
			Msg("process provider: machines are capn-node processes (no kubelet)")
	}
	return sdk.NewService(p, s.Provider).Run(ctx, d)
}
