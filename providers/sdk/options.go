package sdk

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/capn-dev/capn/services/daemon"
)

// Defaults of Options.
const (
	DefaultReconcileEvery = 30 * time.Second
	DefaultAnnounceEvery  = 10 * time.Second
	DefaultConcurrency    = 8
	DefaultMaxDeliver     = 10
	// AnnouncementStale is how old an announcement's time may be before
	// the core treats the provider as not running: three missed refreshes
	// at the default AnnounceEvery.
	AnnouncementStale = 30 * time.Second
	// NoReconcile as Options.ReconcileEvery disables the periodic drift
	// reconcile (Recheck still works).
	NoReconcile time.Duration = -1
)

// Options configure a provider service. The zero value gives the defaults.
type Options struct {
	// Version is announced with the provider (default: the module version
	// from the build info, or "dev").
	Version string
	// Instance names this process in the announcement (default
	// <hostname>-<pid>). Replicas of one provider share its durable
	// consumer; each announces under its instance, the last one wins.
	Instance string
	// Concurrency is how many commands are handled at once (default 8).
	// Commands of one machine never run concurrently, whatever it is.
	Concurrency int
	// MaxDeliver bounds deliveries of one command (default 10). The last
	// delivery of a failing create records the machine as Failed.
	MaxDeliver int
	// ReconcileEvery is how often the SDK compares List with the observed
	// infra keys to find drift (default 30s; NoReconcile disables it).
	ReconcileEvery time.Duration
	// AnnounceEvery is how often the announcement provider.<name> is
	// refreshed (default 10s; it must stay well below AnnouncementStale).
	AnnounceEvery time.Duration
}

func (o Options) withDefaults() Options {
	if o.Version == "" {
		o.Version = "dev"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			o.Version = bi.Main.Version
		}
	}
	if o.Instance == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "unknown"
		}
		o.Instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.MaxDeliver == 0 {
		o.MaxDeliver = DefaultMaxDeliver
	}
	if o.ReconcileEvery == 0 {
		o.ReconcileEvery = DefaultReconcileEvery
	}
	if o.AnnounceEvery == 0 {
		o.AnnounceEvery = DefaultAnnounceEvery
	}
	return o
}

// Validate reports every invalid option at once.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	bad := func(flag, env, value, problem string) {
		errs = append(errs, &daemon.FieldError{Flag: flag, Env: env, Value: value, Problem: problem})
	}
	if o.Concurrency < 1 {
		bad("provider-concurrency", "CAPN_PROVIDER_CONCURRENCY", fmt.Sprint(o.Concurrency), "must be at least 1")
	}
	if o.MaxDeliver < 1 {
		bad("", "MaxDeliver", fmt.Sprint(o.MaxDeliver), "must be at least 1")
	}
	if o.ReconcileEvery < 0 && o.ReconcileEvery != NoReconcile {
		bad("provider-reconcile-every", "CAPN_PROVIDER_RECONCILE_EVERY", o.ReconcileEvery.String(), "must be positive (or -1ns to disable)")
	}
	if o.AnnounceEvery < 0 || o.AnnounceEvery > AnnouncementStale/2 {
		bad("provider-announce-every", "CAPN_PROVIDER_ANNOUNCE_EVERY", o.AnnounceEvery.String(),
			fmt.Sprintf("must be positive and at most %s (half the staleness limit)", AnnouncementStale/2))
	}
	return errors.Join(errs...)
}

// Flags binds the options a deployment tunes to flags and CAPN_PROVIDER_*
// variables: --provider-concurrency, --provider-reconcile-every,
// --provider-announce-every, --provider-instance.
func (o *Options) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "provider-concurrency", Env: "CAPN_PROVIDER_CONCURRENCY", Usage: "`commands` handled at once (0: 8)", Value: daemon.IntValue(&o.Concurrency)},
		{Name: "provider-reconcile-every", Env: "CAPN_PROVIDER_RECONCILE_EVERY", Usage: "`interval` of the drift reconcile (0: 30s)", Value: daemon.DurationValue(&o.ReconcileEvery)},
		{Name: "provider-announce-every", Env: "CAPN_PROVIDER_ANNOUNCE_EVERY", Usage: "`interval` of the announcement refresh (0: 10s)", Value: daemon.DurationValue(&o.AnnounceEvery)},
		{Name: "provider-instance", Env: "CAPN_PROVIDER_INSTANCE", Usage: "`name` of this replica in the announcement (default host-pid)", Value: daemon.StringValue(&o.Instance)},
	}
}
