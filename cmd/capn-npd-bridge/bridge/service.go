package bridge

import (
	"context"
	"regexp"
	"strings"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the program's service name.
const Name = "npd-bridge"

// Service runs a Bridge as a capn program (daemon.Main): flags and
// CAPN_* variables, logging, its NATS connection and /healthz. On a node,
// run it with --skip-provision (a node's NATS user should be allowed to
// publish its own health subjects only) and --http-addr off or a free port.
type Service struct {
	Config Config
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
	_ daemon.Validator    = (*Service)(nil)
)

// NewService returns the bridge's service.
func NewService(cfg Config) *Service { return &Service{Config: cfg} }

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// Flags implements daemon.FlagProvider.
func (s *Service) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "npd-url", Env: envOf("npd-url"), Usage: "node-problem-detector's metrics URL", Value: daemon.StringValue(&s.Config.URL)},
		{Name: "cluster", Env: envOf("cluster"), Usage: "the capn cluster of this node", Value: daemon.StringValue(&s.Config.Cluster)},
		{Name: "machine", Env: envOf("machine"), Usage: "the capn machine this node is", Value: daemon.StringValue(&s.Config.Machine)},
		{Name: "source", Env: envOf("source"), Usage: "the reports' source", Value: daemon.StringValue(&s.Config.Source)},
		{Name: "interval", Env: envOf("interval"), Usage: "time between scrapes", Value: daemon.DurationValue(&s.Config.Interval)},
		{Name: "resync-every", Env: envOf("resync-every"), Usage: "re-send unchanged conditions this often", Value: daemon.DurationValue(&s.Config.ResyncEvery)},
	}
}

// Validate implements daemon.Validator.
func (s *Service) Validate() error { return s.Config.Validate() }

// Run implements daemon.Service: it publishes to NATS.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	b := New(s.Config, NATSSink{Publisher: events.NewPublisher(d.JS, "capn/"+Name+"/"+s.Config.Machine)})
	d.Ready.Set(true)
	return b.Run(d.Log.With().Str("cluster", s.Config.Cluster).Str("machine", s.Config.Machine).Logger().WithContext(ctx))
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

func validName(s string) bool { return nameRE.MatchString(s) }

// envOf is CAPN_NPD_ and the flag in upper snake case.
func envOf(flag string) string {
	return "CAPN_NPD_" + strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(flag, "npd-"), "-", "_"))
}
