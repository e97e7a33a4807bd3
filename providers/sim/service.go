package sim

import (
	"context"
	"errors"

	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/services/daemon"
)

// Service is the sim provider as a daemon.Service with its own flags
// (daemon.FlagProvider) and validation (daemon.Validator): what
// cmd/capn-provider-sim and capn dev run. Each Run builds a new Provider
// that re-adopts its machines from observed KV, as a restarted process
// would.
type Service struct {
	// Sim shapes the simulation; Provider tunes the SDK.
	Sim      Options
	Provider sdk.Options
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
	_ daemon.Validator    = (*Service)(nil)
)

// NewService returns the sim provider's service.
func NewService(sim Options, provider sdk.Options) *Service {
	return &Service{Sim: sim, Provider: provider}
}

// Name is provider-sim.
func (s *Service) Name() string { return sdk.ServiceName(Name) }

// Flags are the --sim-* and --provider-* flags.
func (s *Service) Flags() []daemon.Flag {
	return append(s.Sim.Flags(), s.Provider.Flags()...)
}

// Validate reports every bad option at once.
func (s *Service) Validate() error {
	return errors.Join(s.Sim.Validate(), s.Provider.Validate())
}

// Run runs a new simulated provider through the SDK until ctx ends.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	p, err := New(s.Sim)
	if err != nil {
		return err
	}
	return sdk.NewService(p, s.Provider).Run(ctx, d)
}
