package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
)

// waitGoal is what a wait waits for.
type waitGoal int

const (
	// untilReady: the cluster's status has seen the generation applied and
	// its Ready condition is True.
	untilReady waitGoal = iota
	// untilGone: the cluster no longer exists.
	untilGone
	// untilHibernated: the status has seen the generation applied and its
	// Hibernated condition is True.
	untilHibernated
)

// Progress refresh: in place every second on a terminal; otherwise a line
// on every change, and at least every plainEvery so logs show it is alive.
const (
	ttyEvery   = time.Second
	plainEvery = 30 * time.Second
)

// errWaitDone ends the watch when the goal is reached.
var errWaitDone = errors.New("done")

// waitFailed is a wait that cannot succeed any more (the spec is invalid,
// the cluster is being deleted).
type waitFailed struct{ msg string }

func (e waitFailed) Error() string { return e.msg }

// waiter follows one cluster through the watch stream and shows progress.
type waiter struct {
	s       *session
	cluster string
	goal    waitGoal
	gen     int64 // untilReady: the status must have observed at least this
	timeout time.Duration
	out     io.Writer
	tty     bool
	width   int
	now     func() time.Time

	mu       sync.Mutex
	start    time.Time
	c        *capnv1.Cluster
	machines map[string]*capnv1.Machine
	synced   bool
	seen     bool // the cluster existed during the wait
	// deleteSeen: the planner's status said the deletion is under way.
	deleteSeen bool
	failed     error
	last       string // the last progress line shown
	drawn      bool   // a progress line is on the terminal
}

// waitFor waits for the cluster to reach goal, showing progress on stderr.
func (s *session) waitFor(ctx context.Context, cluster string, goal waitGoal, gen int64, timeout time.Duration) error {
	tty, width := terminal(s.e)
	w := &waiter{s: s, cluster: cluster, goal: goal, gen: gen, timeout: timeout, out: s.e.stderr,
		tty: tty, width: width, now: time.Now, machines: map[string]*capnv1.Machine{}}
	return w.run(ctx)
}

// terminal says whether stderr is a terminal and how wide it is.
func terminal(e env) (bool, int) {
	f, ok := e.stderr.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false, 0
	}
	if t, _ := e.lookup("TERM"); t == "dumb" {
		return false, 0
	}
	w, _, err := term.GetSize(int(f.Fd()))
	if err != nil || w < 20 {
		w = 80
	}
	return true, w
}

func (w *waiter) run(ctx context.Context) error {
	w.start = w.now()
	wctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	tickDone := make(chan struct{})
	stopTick := make(chan struct{})
	go func() {
		defer close(tickDone)
		every := plainEvery
		if w.tty {
			every = ttyEvery
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stopTick:
				return
			case <-t.C:
				w.mu.Lock()
				w.show(w.tty) // plain: a line even without a change
				w.mu.Unlock()
			}
		}
	}()
	err := w.s.c.Watch(wctx, client.WatchOptions{Cluster: w.cluster}, w.handle)
	close(stopTick)
	<-tickDone

	w.mu.Lock()
	defer w.mu.Unlock()
	w.clearLine()
	elapsed := w.elapsed()
	switch {
	case errors.Is(err, errWaitDone):
		if w.goal == untilGone {
			fmt.Fprintf(w.out, "cluster/%s is gone after %s\n", w.cluster, elapsed)
		} else if w.goal == untilHibernated {
			fmt.Fprintf(w.out, "cluster/%s is hibernated after %s: %s\n", w.cluster, elapsed, conditions.Get(w.c.GetStatus().GetConditions(), condHibernated).GetMessage())
		} else {
			fmt.Fprintf(w.out, "cluster/%s is ready after %s: %s\n", w.cluster, elapsed, plural(int(machineCounts(w.c).desired), "machine"))
		}
		return nil
	case w.failed != nil:
		return w.failed
	case errors.Is(wctx.Err(), context.DeadlineExceeded):
		// The caller's deadline too: a wait for several clusters shares
		// one --timeout, and says it timed out after the whole of it.
		return w.timedOut()
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return err
}

// handle takes one watch event, under the lock.
func (w *waiter) handle(ev client.WatchEvent) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch ev.Type {
	case api.WatchReset:
		w.c, w.machines = nil, map[string]*capnv1.Machine{}
	case api.WatchSynced:
		w.synced = true
	case api.WatchAdded, api.WatchModified:
		if ev.Cluster != nil {
			w.c, w.seen = ev.Cluster, true
			st := ev.Cluster.GetStatus()
			if conditions.Get(st.GetConditions(), condDeleting) != nil || st.GetPhaseValue() == capnv1.ClusterDeleting {
				w.deleteSeen = true
			}
		}
		if ev.Machine != nil {
			w.machines[ev.Machine.GetMetadata().GetName()] = ev.Machine
		}
	case api.WatchDeleted:
		if ev.Cluster != nil {
			w.c = nil
		}
		if ev.Machine != nil {
			delete(w.machines, ev.Machine.GetMetadata().GetName())
		}
	}
	if !w.synced {
		return nil
	}
	if done, err := w.check(); done || err != nil {
		w.failed = err
		if err != nil {
			return err
		}
		return errWaitDone
	}
	w.show(false)
	return nil
}

// check says whether the goal is reached, or an error when it no longer
// can be.
func (w *waiter) check() (bool, error) {
	if w.goal == untilGone {
		return w.c == nil, nil
	}
	if w.c == nil {
		if w.seen {
			return false, waitFailed{fmt.Sprintf("cluster %s was deleted while waiting for it to be ready", w.cluster)}
		}
		// Not in the gateway's view yet: the write this wait follows may
		// reach its watch cache a moment after the watch syncs.
		return false, nil
	}
	if w.c.GetMetadata().GetDeletionTimestamp() != nil {
		return false, waitFailed{fmt.Sprintf("cluster %s is being deleted: it will not become ready", w.cluster)}
	}
	st := w.c.GetStatus()
	if st.GetObservedGeneration() < w.gen {
		return false, nil
	}
	rc := conditions.Get(st.GetConditions(), condReady)
	if rc.GetReason() == "InvalidSpec" {
		return false, waitFailed{fmt.Sprintf("cluster %s will not become ready: %s", w.cluster, rc.GetMessage())}
	}
	if w.goal == untilHibernated {
		return conditions.Get(st.GetConditions(), condHibernated).GetStatusValue() == capnv1.ConditionTrue, nil
	}
	return rc.GetStatusValue() == capnv1.ConditionTrue, nil
}

// state is the progress as words: the phase and machine counts, and the
// current step (the Ready or Deleting condition's message).
func (w *waiter) state() (summary, step string) {
	if w.c == nil {
		if !w.synced {
			return "connecting", "reading the cluster's state from the gateway"
		}
		return "gone", ""
	}
	st := w.c.GetStatus()
	phase := clusterPhase(w.c)
	if w.goal == untilGone {
		summary = fmt.Sprintf("%s, %s left", phase, plural(len(w.machines), "machine"))
		dc := conditions.Get(st.GetConditions(), condDeleting)
		switch {
		case w.c.GetSpec().GetPaused() || st.GetPhaseValue() == capnv1.ClusterPaused:
			step = fmt.Sprintf("the cluster is paused: its deletion waits for capn resume %s", w.cluster)
		case dc != nil:
			step = dc.GetMessage()
		case w.deleteSeen:
			// The planner removes the status just before the record.
			step = "removing the cluster's last records"
		default:
			step = "waiting for capn to start deleting"
		}
		return summary, step
	}
	summary = phase + ", " + machineCounts(w.c).progress()
	switch rc, hc := conditions.Get(st.GetConditions(), condReady), conditions.Get(st.GetConditions(), condHibernated); {
	case st.GetObservedGeneration() < w.gen:
		step = fmt.Sprintf("waiting for capn to act on generation %d", w.gen)
	case w.goal == untilHibernated && hc != nil:
		step = hc.GetMessage()
	case rc != nil:
		step = rc.GetMessage()
	}
	return summary, step
}

// failedMachines lists the machines in phase Failed with their reasons.
func (w *waiter) failedMachines() []string {
	var out []string
	for _, name := range sortedKeys(w.machines) {
		m := w.machines[name]
		if capnv1.MachinePhaseOf(machinePhase(m)) != capnv1.MachineFailed {
			continue
		}
		reason, msg := machineTrouble(m)
		s := name + ": " + reason
		if msg != "" {
			s += ": " + msg
		}
		out = append(out, s)
	}
	return out
}

func (w *waiter) elapsed() time.Duration { return w.now().Sub(w.start).Round(time.Second) }

// show draws the progress: in place on a terminal; as a line otherwise,
// when it changed (or when force is set).
func (w *waiter) show(force bool) {
	summary, step := w.state()
	progress := summary + ": " + step
	if failed := w.failedMachines(); len(failed) > 0 {
		progress += " [failed: " + strings.Join(failed, "; ") + "]"
	}
	if !w.tty {
		if progress == w.last && !force {
			return
		}
		w.last = progress
		fmt.Fprintf(w.out, "[%s] %s: %s\n", w.elapsed(), w.cluster, progress)
		return
	}
	line := fmt.Sprintf("%s  %s  %s  %s", w.cluster, summary, w.elapsed(), step)
	if r := []rune(line); len(r) > w.width-1 {
		line = string(r[:w.width-2]) + "…"
	}
	if line == w.last && w.drawn && !force {
		return
	}
	w.last = line
	fmt.Fprintf(w.out, "\r\x1b[K%s", line)
	w.drawn = true
}

// clearLine removes the progress line from a terminal.
func (w *waiter) clearLine() {
	if w.tty && w.drawn {
		fmt.Fprint(w.out, "\r\x1b[K")
		w.drawn = false
	}
}

// timedOut is the error of a wait that ran out of time: what the cluster
// was doing and what blocks it.
func (w *waiter) timedOut() error {
	what := map[waitGoal]string{untilReady: "ready", untilGone: "deleted", untilHibernated: "hibernated"}[w.goal]
	var b strings.Builder
	fmt.Fprintf(&b, "timed out after %s waiting for cluster %s to be %s", w.timeout, w.cluster, what)
	summary, step := w.state()
	fmt.Fprintf(&b, "\n  state:    %s", summary)
	st := w.c.GetStatus()
	switch {
	case w.goal == untilGone && w.c != nil:
		if step != "" {
			fmt.Fprintf(&b, "\n  blocking: %s", step)
		}
		var left []string
		for _, name := range sortedKeys(w.machines) {
			left = append(left, name+" ("+machinePhase(w.machines[name])+")")
		}
		if len(left) > 0 {
			fmt.Fprintf(&b, "\n  left:     %s", strings.Join(left, ", "))
		}
	case w.c != nil && st.GetObservedGeneration() < w.gen:
		fmt.Fprintf(&b, "\n  blocking: capn has not acted on generation %d yet (the status is of generation %d): is the cluster-planner running?", w.gen, st.GetObservedGeneration())
	case w.c != nil:
		if rc := conditions.Get(st.GetConditions(), condReady); rc != nil {
			fmt.Fprintf(&b, "\n  blocking: Ready=%s %s: %s", rc.GetStatus(), rc.GetReason(), rc.GetMessage())
		} else {
			b.WriteString("\n  blocking: the cluster has no Ready condition yet: is the cluster-planner running?")
		}
		if st.GetPhaseValue() == capnv1.ClusterPaused || w.c.GetSpec().GetPaused() {
			fmt.Fprintf(&b, "\n  note:     the cluster is paused (capn resume %s)", w.cluster)
		}
	}
	for _, f := range w.failedMachines() {
		fmt.Fprintf(&b, "\n  failed:   %s", f)
	}
	return errors.New(b.String())
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// plural is "1 machine", "2 machines".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
