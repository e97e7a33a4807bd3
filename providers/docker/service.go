package docker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/providers/docker/engine"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

// Service is the docker provider as a daemon.Service with its own flags
// and validation: what cmd/capn-provider-docker and capn dev run. Each Run
// builds a new Provider; the containers run on.
type Service struct {
	// Docker configures the machines; Provider tunes the SDK.
	Docker   Options
	Provider sdk.Options
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
	_ daemon.Validator    = (*Service)(nil)
)

// NewService returns the docker provider's service.
func NewService(docker Options, provider sdk.Options) *Service {
	return &Service{Docker: docker, Provider: provider}
}

// Name is provider-docker.
func (s *Service) Name() string { return sdk.ServiceName(Name) }

// Flags are the --docker-* and --provider-* flags.
func (s *Service) Flags() []daemon.Flag {
	return append(s.Docker.Flags(), s.Provider.Flags()...)
}

// Validate reports every bad option at once.
func (s *Service) Validate() error {
	return errors.Join(s.Docker.Validate(), s.Provider.Validate())
}

// Run checks the daemon and the image (Preflight), then runs a new docker
// provider through the SDK until ctx ends. The relay forwards to
// Options.NodeNATSURL, by default the URL this service connected to.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	if err := Preflight(ctx, s.Docker); err != nil {
		return err
	}
	natsURL := s.Docker.NodeNATSURL
	if natsURL == "" {
		natsURL = d.Config.NATS.URL
	}
	p, err := New(s.Docker, natsURL)
	if err != nil {
		return err
	}
	kv, err := d.JS.KeyValue(ctx, events.BucketObserved)
	if err != nil {
		return fmt.Errorf("docker: bucket %s: %w", events.BucketObserved, err)
	}
	p.log = d.Log.With().Str("provider", Name).Logger()
	p.secrets = store.NewBucket(kv, store.New[capnv1.ClusterSecretsStatus]())
	p.log.Info().Str("docker_host", p.api.Host()).Str("image", p.opts.Image).Str("deployment", p.opts.Deployment).
		Bool("relay", p.opts.ContainerNATSURL == "").Msg("docker provider: machines are capn-node containers (no kubelet)")
	return sdk.NewService(p, s.Provider).Run(ctx, d)
}

// Preflight checks, within 10s, that the daemon answers and that the
// machines' image exists locally, with an error saying what to do: the
// image is never pulled (there is no registry), `make images` builds it.
// capn dev runs the docker provider only when Preflight passes.
func Preflight(ctx context.Context, opts Options) error {
	opts = opts.withDefaults()
	api, err := engine.New(opts.Host)
	if err != nil {
		return err
	}
	defer api.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := api.Ping(ctx); err != nil {
		return fmt.Errorf("docker provider: cannot reach the Docker daemon at %s: %w", api.Host(), err)
	}
	if _, err := api.ImageInspect(ctx, opts.Image); errors.Is(err, engine.ErrNotFound) {
		return fmt.Errorf("docker provider: image %s is not on the daemon at %s: build it with `%s` (deploy/images/capn-node.Dockerfile); it is never pulled", opts.Image, api.Host(), ImageTarget)
	} else if err != nil {
		return fmt.Errorf("docker provider: inspect image %s: %w", opts.Image, err)
	}
	return nil
}
