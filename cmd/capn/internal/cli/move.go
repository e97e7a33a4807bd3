package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/capn-dev/capn/cmd/capn/internal/clientconfig"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

const moveHelp = `
Hands live clusters from this capn deployment to another (Cluster API's
clusterctl move): the clusters keep running — the same machines, Nodes
and data — and the other deployment manages them from then on.

CONFIG is the other deployment's client config (a YAML file with server
and token, as capn dev writes to <data-dir>/client.yaml); its token needs
the secrets and write scopes, as does this one's. The other deployment
must hold the key this one's secrets are sealed with (as its key or an
old key: capn dev takes CAPN_SECRETS_KEY).

For each cluster, in order:
  1. check: it exists here, is not being deleted, every machine is
     Running or Stopped; the other deployment has no cluster of the name
  2. pause it here (capn stops acting on it)
  3. back it up here and restore it there, paused; the other
     deployment's providers adopt its machines and infrastructure
  4. delete it here with the Orphan policy: capn lets go of it without
     touching it (no machine, Node or infrastructure is deleted)
  5. resume it there, unless it was paused before the move
If a step before 4 fails, what was done is undone: the other deployment
lets go of what it adopted and the cluster is resumed here.

Process machines move only to a deployment on this host: its process
provider takes their directories over (a link stays in this data dir:
keep it until they restart there) and their node agents move to its
NATS; nothing restarts (docs/operations.md).

Examples:
  capn move --to ~/other-capn/client.yaml demo
  capn move --to prod.yaml web-1 web-2
`

func cmdMove(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn move --to CONFIG CLUSTER...", moveHelp)
	var a apiFlags
	a.bind(fs)
	var to string
	var timeout, adoptWait time.Duration
	fs.StringVar(&to, "to", "", "the other deployment's client config `file` (server and token)")
	fs.DurationVar(&timeout, "timeout", 10*time.Minute, "how long the whole move may take")
	fs.DurationVar(&adoptWait, "adopt-wait", time.Minute, "how long the other deployment's providers may take to adopt the machines")
	const name = "capn move"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if to == "" {
		return reportError(e.stderr, name, nil, usageError{"--to CONFIG is required: the client config of the deployment to move to"})
	}
	if len(pos) == 0 {
		return reportError(e.stderr, name, nil, usageError{"name at least one CLUSTER to move"})
	}
	cfg, err := clientconfig.Read(to)
	if err != nil {
		return reportError(e.stderr, name, nil, fmt.Errorf("--to: %w", err))
	}
	if cfg.Server == "" {
		return reportError(e.stderr, name, nil, usageError{"--to " + to + " names no server"})
	}
	src, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if strings.TrimSuffix(src.conn.Server, "/") == strings.TrimSuffix(cfg.Server, "/") {
		return reportError(e.stderr, name, nil, usageError{"--to names the gateway this command talks to (" + cfg.Server + "): nothing to move"})
	}
	dst, err := client.New(cfg.Server, client.WithToken(cfg.Token), client.WithUserAgent("capn/"+versionShort()))
	if err != nil {
		return reportError(e.stderr, name, nil, fmt.Errorf("--to: %w", err))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m := &move{e: e, src: src, dst: dst, to: cfg.Server, clusters: pos, adoptWait: adoptWait}
	if err := m.run(ctx); err != nil {
		fmt.Fprintf(e.stderr, "%s: %v\n", name, err)
		return daemon.ExitFailed
	}
	return daemon.ExitOK
}

// move is one capn move.
type move struct {
	e         env
	src       *session
	dst       *client.Client
	to        string
	clusters  []string
	adoptWait time.Duration
	// wasPaused: the clusters paused before the move (left paused there).
	wasPaused map[string]bool
	// paused: the clusters this move paused here (resumed on a failure).
	paused []string
}

func (m *move) say(format string, args ...any) { fmt.Fprintf(m.e.stderr, format+"\n", args...) }

func (m *move) run(ctx context.Context) error {
	if err := m.check(ctx); err != nil {
		return err
	}
	for _, c := range m.clusters {
		if m.wasPaused[c] {
			continue
		}
		if _, err := m.src.c.Pause(ctx, c); err != nil {
			return m.undo(ctx, false, fmt.Errorf("pause %s: %w", c, err))
		}
		m.paused = append(m.paused, c)
	}
	m.say("paused %s here", strings.Join(m.clusters, ", "))
	body, backup, err := m.src.c.Backup(ctx, m.clusters, "move")
	if err != nil {
		return m.undo(ctx, false, fmt.Errorf("back up %s: %w", strings.Join(m.clusters, ", "), err))
	}
	file, err := io.ReadAll(body)
	_ = body.Close()
	if err != nil {
		return m.undo(ctx, false, fmt.Errorf("read backup %s: %w", backup, err))
	}
	m.say("backed up as %s (%d bytes)", backup, len(file))
	dry, err := m.dst.Restore(ctx, file, client.RestoreOptions{Merge: true, DryRun: true})
	if err != nil {
		return m.undo(ctx, false, fmt.Errorf("check the restore at %s: %w", m.to, err))
	}
	if len(dry.GetConflicts()) > 0 {
		var names []string
		for _, c := range dry.GetConflicts() {
			names = append(names, c.GetCluster()+" ("+c.GetMessage()+")")
		}
		return m.undo(ctx, false, fmt.Errorf("%s already holds %s", m.to, strings.Join(names, "; ")))
	}
	r, err := m.dst.Restore(ctx, file, client.RestoreOptions{Merge: true, AdoptWait: m.adoptWait})
	if err != nil {
		return m.undo(ctx, true, fmt.Errorf("restore at %s: %w", m.to, err))
	}
	if len(r.GetWaiting()) > 0 {
		return m.undo(ctx, true, fmt.Errorf("the providers at %s adopted %d of %d machines and infrastructures; not adopted: %s",
			m.to, r.GetAdopted(), r.GetAdoptions(), strings.Join(r.GetWaiting(), ", ")))
	}
	m.say("restored at %s, paused: %d machines and infrastructures adopted by its providers", m.to, r.GetAdopted())

	// From here on the other deployment holds the clusters: let go of them
	// here without touching them.
	for _, c := range m.clusters {
		if _, err := m.src.c.Delete(ctx, c, client.Orphan); err != nil {
			return fmt.Errorf("let go of %s here (delete with the Orphan policy): %w; %s holds it now: finish with 'capn delete %s --orphan'", c, err, m.to, c)
		}
	}
	m.say("letting go of %s here (Orphan policy: nothing in the world is touched)", strings.Join(m.clusters, ", "))
	if err := m.waitGone(ctx); err != nil {
		return err
	}
	for _, c := range m.clusters {
		if m.wasPaused[c] {
			m.say("%s was paused before the move: left paused at %s", c, m.to)
			continue
		}
		if _, err := m.dst.Resume(ctx, c); err != nil {
			return fmt.Errorf("resume %s at %s: %w (resume it there: capn resume %s)", c, m.to, err, c)
		}
	}
	fmt.Fprintf(m.e.stdout, "moved %s to %s\n", strings.Join(m.clusters, ", "), m.to)
	return nil
}

// check refuses a move that cannot be done as asked, before anything is
// changed.
func (m *move) check(ctx context.Context) error {
	m.wasPaused = map[string]bool{}
	var problems []string
	for _, c := range m.clusters {
		cl, err := m.src.c.Get(ctx, c)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		if cl.GetMetadata().GetDeletionTimestamp() != nil {
			problems = append(problems, c+": being deleted")
			continue
		}
		if cl.GetSpec().GetControlPlane().Implementation() == capnv1.ControlPlaneHosted {
			problems = append(problems, c+": its control plane is hosted here (its processes and etcd data are this deployment's controlplane-hosted): it cannot move")
			continue
		}
		m.wasPaused[c] = cl.GetSpec().GetPaused()
		machines, err := m.src.c.Machines(ctx, c, client.ListOptions{})
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", c, err))
			continue
		}
		for _, mm := range machines {
			switch {
			case mm.GetMetadata().GetDeletionTimestamp() != nil:
				problems = append(problems, fmt.Sprintf("%s: machine %s is being deleted", c, mm.GetMetadata().GetName()))
			case mm.GetStatus().GetPhaseValue() != capnv1.MachineRunning && mm.GetStatus().GetPhaseValue() != capnv1.MachineStopped:
				problems = append(problems, fmt.Sprintf("%s: machine %s is %s (wait until every machine is Running or Stopped)", c, mm.GetMetadata().GetName(), phaseOrPending(mm.GetStatus().GetPhase())))
			}
		}
		if _, err := m.dst.Get(ctx, c); err == nil {
			problems = append(problems, fmt.Sprintf("%s: %s already has a cluster of this name", c, m.to))
		} else if !client.IsNotFound(err) {
			problems = append(problems, fmt.Sprintf("%s: at %s: %v", c, m.to, err))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("nothing was changed:\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// undo puts things back after a failed step: the other deployment lets
// go of what it restored (Orphan policy: its providers drop what they
// adopted, nothing is touched), and the clusters this move paused here are
// resumed.
func (m *move) undo(ctx context.Context, restored bool, cause error) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	if restored {
		for _, c := range m.clusters {
			if _, err := m.dst.Delete(ctx, c, client.Orphan); err != nil && !client.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("let go of %s at %s: %w", c, m.to, err))
			}
		}
	}
	for _, c := range m.paused {
		if _, err := m.src.c.Resume(ctx, c); err != nil {
			errs = append(errs, fmt.Errorf("resume %s here: %w", c, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w; undoing it failed too: %w", cause, errors.Join(errs...))
	}
	return fmt.Errorf("%w; nothing was moved (the clusters are as they were here)", cause)
}

// waitGone waits until every cluster is gone here.
func (m *move) waitGone(ctx context.Context) error {
	left := slices.Clone(m.clusters)
	for len(left) > 0 {
		left = slices.DeleteFunc(left, func(c string) bool {
			_, err := m.src.c.Get(ctx, c)
			return client.IsNotFound(err)
		})
		if len(left) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s still here after the move's timeout; %s holds them: they finish letting go by themselves", strings.Join(left, ", "), m.to)
		case <-time.After(250 * time.Millisecond):
		}
	}
	return nil
}

func phaseOrPending(s string) string {
	if s == "" {
		return "Pending"
	}
	return s
}
