package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// machineWaitEvery is how often capn delete machine --wait looks at the
// machine and its replacement.
const machineWaitEvery = time.Second

// machineTarget is the one machine of capn delete machine NAME --cluster
// CLUSTER (machine/NAME too).
func machineTarget(r refs, cluster string) (string, error) {
	switch {
	case len(r.names) == 0:
		return "", usagef("missing the machine's NAME: capn delete machine NAME --cluster CLUSTER")
	case len(r.names) > 1:
		return "", usagef("capn deletes one machine at a time (each is drained and replaced): got %d", len(r.names))
	case cluster == "":
		return "", usagef("--cluster is required: the cluster of machine %s (capn delete machine %s --cluster CLUSTER)", r.names[0], r.names[0])
	}
	return r.names[0], nil
}

// deleteMachine asks for a machine's deletion: capn drains it (its
// lifecycle hooks hold it), deletes it, and the cluster-planner replaces
// it. With --wait it follows the machine until it is gone and a
// replacement in its pool is Running, printing a line on stderr whenever
// the machine's phase or what it waits for changes.
func (s *session) deleteMachine(ctx context.Context, cluster, machine string, wf waitFlags) error {
	var before []*capnv1.Machine
	if wf.wait {
		var err error
		if before, err = s.c.Machines(ctx, cluster, client.ListOptions{}); err != nil {
			return err
		}
	}
	m, err := s.c.DeleteMachine(ctx, cluster, machine)
	if err != nil {
		return err
	}
	if !wf.wait {
		fmt.Fprintf(s.e.stdout, "machine/%s deleting: capn drains it, deletes it and replaces it\n", machine)
		return nil
	}
	known := map[string]bool{}
	for _, b := range before {
		known[b.GetMetadata().GetName()] = true
	}
	f := &machineFollower{s: s, cluster: cluster, machine: machine, pool: m.GetSpec().GetPool(), known: known, lines: map[string]string{}}
	wctx, cancel := context.WithTimeout(ctx, wf.timeout)
	defer cancel()
	tick := time.NewTicker(machineWaitEvery)
	defer tick.Stop()
	for {
		done, err := f.look(wctx)
		switch {
		case done:
			return nil
		case err != nil && wctx.Err() == nil:
			return err
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return f.timedOut(wf.timeout)
		case <-tick.C:
		}
	}
}

// machineFollower follows a deleted machine and its replacement.
type machineFollower struct {
	s                      *session
	cluster, machine, pool string
	// known are the machines there before the deletion: a replacement is
	// a machine of the pool that is not one of them.
	known       map[string]bool
	gone        bool
	replacement *capnv1.Machine
	lines       map[string]string // the last progress line of each machine
}

// look reads the machine and its pool once; done when the machine is gone
// and a replacement runs.
func (f *machineFollower) look(ctx context.Context) (bool, error) {
	s := f.s
	if !f.gone {
		m, err := s.c.Machine(ctx, f.cluster, f.machine)
		switch {
		case client.IsNotFound(err):
			f.gone = true
			fmt.Fprintf(s.e.stdout, "machine/%s deleted\n", f.machine)
		case err != nil:
			return false, err
		default:
			f.progress(m, "")
		}
	}
	ms, err := s.c.Machines(ctx, f.cluster, client.ListOptions{})
	if err != nil {
		return false, err
	}
	f.replacement = nil
	for _, m := range ms {
		if name := m.GetMetadata().GetName(); !f.known[name] && m.GetSpec().GetPool() == f.pool && m.GetMetadata().GetDeletionTimestamp() == nil {
			f.replacement = m
			f.progress(m, " (replacement)")
			break
		}
	}
	running := f.replacement != nil && f.replacement.GetStatus().GetPhaseValue() == capnv1.MachineRunning
	if f.gone && running {
		fmt.Fprintf(s.e.stdout, "machine/%s replaces it: Running\n", f.replacement.GetMetadata().GetName())
		return true, nil
	}
	return false, nil
}

// progress prints a machine's phase and what it waits for, when that
// changed since the last line about it.
func (f *machineFollower) progress(m *capnv1.Machine, note string) {
	name := m.GetMetadata().GetName()
	line := "machine/" + name + note + ": " + machineState(m)
	if f.lines[name] != line {
		f.lines[name] = line
		fmt.Fprintln(f.s.e.stderr, line)
	}
}

// machineState is a machine's phase, and the condition it waits on (or
// that its deletion is requested, before the machine-manager took it up).
func machineState(m *capnv1.Machine) string {
	state := machinePhase(m)
	if p := capnv1.MachinePhaseOf(state); m.GetMetadata().GetDeletionTimestamp() != nil && p != capnv1.MachineDeleting && p != capnv1.MachineDeleted {
		return state + " — deletion requested"
	}
	if reason, msg := machineTrouble(m); reason != "" && reason != state {
		state += " — " + reason
		if msg != "" {
			state += ": " + msg
		}
	}
	return state
}

func (f *machineFollower) timedOut(timeout time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "timed out after %s waiting for machine %s to be deleted and replaced", timeout, f.machine)
	names := make([]string, 0, len(f.lines))
	for n := range f.lines {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "\n  %s", f.lines[n])
	}
	if f.gone && f.replacement == nil {
		fmt.Fprintf(&b, "\n  no replacement in pool %s yet: is the cluster-planner running, or was the pool scaled down?", f.pool)
	}
	return errors.New(b.String())
}
