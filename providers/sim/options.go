package sim

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/capn-dev/capn/services/daemon"
)

// DefaultHeartbeatEvery is how often a running simulated node reports.
const DefaultHeartbeatEvery = 30 * time.Second

// Options shape the simulation. The zero value is a fast, perfect world
// (no boot latency, no failures, heartbeats every 30s) — what tests want;
// DefaultOptions is what capn dev and the program use.
type Options struct {
	// BootLatency is how long a machine stays Creating before it is
	// Running and its node reports; it is also how long a started or
	// rebooted node takes to report again.
	BootLatency time.Duration
	// BootJitter adds up to this much to BootLatency, per machine.
	BootJitter time.Duration
	// CreateFailureRate (0..1) is the share of machines whose create fails
	// for good (InfraMachine Failed). Which machines fail is decided by
	// Seed and the machine's name, so a retry of one fails again.
	CreateFailureRate float64
	// VanishRate (0..1) is the share of machines that disappear out of
	// band VanishAfter after they booted: drift the SDK reports as Gone.
	VanishRate  float64
	VanishAfter time.Duration
	// HeartbeatEvery is how often a running node publishes a heartbeat
	// (0: DefaultHeartbeatEvery).
	HeartbeatEvery time.Duration
	// Seed makes every random choice (failures, jitter, vanishing,
	// heartbeat phase) deterministic: the same seed and names give the
	// same simulation.
	Seed int
}

// DefaultOptions are the program's defaults: a 2s boot with up to 1s of
// jitter, no failures.
func DefaultOptions() Options {
	return Options{BootLatency: 2 * time.Second, BootJitter: time.Second, HeartbeatEvery: DefaultHeartbeatEvery}
}

func (o Options) withDefaults() Options {
	if o.HeartbeatEvery == 0 {
		o.HeartbeatEvery = DefaultHeartbeatEvery
	}
	return o
}

// Validate reports every invalid option at once.
func (o Options) Validate() error {
	var errs []error
	bad := func(flag, value, problem string) {
		errs = append(errs, &daemon.FieldError{Flag: flag, Env: envOf(flag), Value: value, Problem: problem})
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"sim-boot-latency", o.BootLatency}, {"sim-boot-jitter", o.BootJitter}, {"sim-vanish-after", o.VanishAfter}, {"sim-heartbeat-every", o.HeartbeatEvery}} {
		if d.v < 0 {
			bad(d.flag, d.v.String(), "must not be negative")
		}
	}
	for _, r := range []struct {
		flag string
		v    float64
	}{{"sim-create-failure-rate", o.CreateFailureRate}, {"sim-vanish-rate", o.VanishRate}} {
		if !(r.v >= 0 && r.v <= 1) {
			bad(r.flag, fmt.Sprint(r.v), "must be between 0 and 1")
		}
	}
	if o.VanishRate > 0 && o.VanishAfter <= 0 {
		bad("sim-vanish-after", o.VanishAfter.String(), "must be positive when --sim-vanish-rate is set")
	}
	if o.HeartbeatEvery > 0 && o.HeartbeatEvery < 10*time.Millisecond {
		bad("sim-heartbeat-every", o.HeartbeatEvery.String(), "must be at least 10ms")
	}
	return errors.Join(errs...)
}

// Flags binds the options to --sim-* flags and CAPN_SIM_* variables.
func (o *Options) Flags() []daemon.Flag {
	f := func(name, usage string, v flag.Value) daemon.Flag {
		return daemon.Flag{Name: name, Env: envOf(name), Usage: usage, Value: v}
	}
	return []daemon.Flag{
		f("sim-boot-latency", "simulated boot `time` of a machine", daemon.DurationValue(&o.BootLatency)),
		f("sim-boot-jitter", "up to this much `time` added to each boot", daemon.DurationValue(&o.BootJitter)),
		f("sim-create-failure-rate", "`share` (0..1) of creates that fail for good", (*floatValue)(&o.CreateFailureRate)),
		f("sim-vanish-rate", "`share` (0..1) of machines that vanish out of band after --sim-vanish-after", (*floatValue)(&o.VanishRate)),
		f("sim-vanish-after", "`time` after boot at which a vanishing machine disappears", daemon.DurationValue(&o.VanishAfter)),
		f("sim-heartbeat-every", "`interval` of simulated node heartbeats", daemon.DurationValue(&o.HeartbeatEvery)),
		f("sim-seed", "`seed` of every random choice of the simulation", daemon.IntValue(&o.Seed)),
	}
}

// envOf is CAPN_ and the flag name in upper snake case.
func envOf(flag string) string {
	b := []byte("CAPN_" + flag)
	for i, c := range b {
		switch {
		case c == '-':
			b[i] = '_'
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

type floatValue float64

func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("not a number")
	}
	*v = floatValue(f)
	return nil
}

func (v *floatValue) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }
