package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/cmd/capn-node/runcmd"
	"github.com/capn-dev/capn/schemas/annotations"
)

// ConditionBootstrapCommands is the node condition the agent reports of
// the bootstrap commands (annotations.CondBootstrapCommands): Unknown
// while they run, True once all did, False with the failure.
const ConditionBootstrapCommands = annotations.CondBootstrapCommands

// Bounds of the condition's message: the command, how it ended and the
// last lines of its output.
const (
	conditionTailLines  = 5
	conditionMessageMax = 2048
	// joinPoll is how often the agent looks whether its node has joined
	// (the control plane serves) before the postCommands.
	joinPoll = 200 * time.Millisecond
)

// commandPlan is CommandsPlanFile: the commands the agent runs.
type commandPlan struct {
	Pre  []runcmd.Command `json:"pre,omitempty"`
	Post []runcmd.Command `json:"post,omitempty"`
}

// commandState is CommandsStateFile: how far the commands ran.
type commandState struct {
	PreDone  bool `json:"preDone,omitempty"`
	PostDone bool `json:"postDone,omitempty"`
	// Failed is the condition of a failure: reported again after a
	// restart, and nothing more runs.
	Failed *kube.Condition `json:"failed,omitempty"`
}

// commandsStatus is what the heartbeats say of the commands.
type commandsStatus struct {
	mu   sync.Mutex
	cond *kube.Condition // nil: nothing to report (no commands)
	done bool            // every command ran (or there were none)
}

func (s *commandsStatus) set(c kube.Condition, done bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.Message = capMessage(c.Message)
	s.cond, s.done = &c, done
}

func (s *commandsStatus) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done = true
}

func (s *commandsStatus) get() (*kube.Condition, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cond == nil {
		return nil, s.done
	}
	c := *s.cond
	return &c, s.done
}

// failed is the failure reported, if any.
func (s *commandsStatus) failed() *kube.Condition {
	c, _ := s.get()
	if c == nil || c.Status != "False" {
		return nil
	}
	return c
}

// capMessage keeps a message under conditionMessageMax: its start (the
// command) and its end (the last output).
func capMessage(m string) string {
	if len(m) <= conditionMessageMax {
		return m
	}
	half := conditionMessageMax/2 - 3
	return m[:half] + " … " + m[len(m)-half:]
}

// runSteps runs what follows the files: the preCommands, the join (the
// control plane or worker of kube-local data; nothing for kubeadm data,
// as no kubeadm runs here), and once the node has joined the
// postCommands. It stops at the first command that fails, and reports
// through the BootstrapCommands condition. A stage a restart interrupted
// runs again (as cloud-init's runcmd after a reboot); a failure is
// final. It returns the channel startKube returned (closed at once when
// nothing runs).
func (a *Agent) runSteps(ctx context.Context) <-chan struct{} {
	none := make(chan struct{})
	close(none)
	if a.cmds.failed() != nil {
		return none // the data could not be run at all (reported)
	}
	state := filepath.Join(a.cfg.DataDir, StateDir)
	var plan commandPlan
	var st commandState
	if err := readJSON(filepath.Join(state, CommandsPlanFile), &plan); err != nil {
		a.cmds.set(kube.Condition{Status: "False", Reason: annotations.ReasonCommandsNotRun, Message: "the bootstrap commands cannot be read: " + err.Error()}, false)
		return none
	}
	if err := readJSON(filepath.Join(state, CommandsStateFile), &st); err != nil {
		a.log.Warn().Err(err).Msg("bootstrap commands' state unreadable: running them as new")
		st = commandState{}
	}
	save := func() {
		b, _ := json.Marshal(st)
		if err := writeFile(filepath.Join(state, CommandsStateFile), append(b, '\n'), 0o600); err != nil {
			a.log.Error().Err(err).Msg("cannot record the bootstrap commands' state")
		}
	}
	total := len(plan.Pre) + len(plan.Post)
	if st.Failed != nil {
		a.log.Error().Str("reason", st.Failed.Reason).Str("message", st.Failed.Message).Msg("bootstrap commands failed before this start; nothing more runs")
		a.cmds.set(*st.Failed, false)
		return none
	}
	if total == 0 {
		kubeDone := a.startKube(ctx) // first: a control plane decides Ready from then on
		a.cmds.finish()
		return kubeDone
	}
	runner := a.runner()
	var last runcmd.Result
	run := func(list []runcmd.Command, done int) bool {
		for i, c := range list {
			a.cmds.set(kube.Condition{Status: "Unknown", Reason: annotations.ReasonCommandsRunning,
				Message: fmt.Sprintf("running %s (%d of %d): %s", c.Name, done+i+1, total, c.Line)}, false)
			last = runner.Run(ctx, c)
			if ctx.Err() != nil {
				return false // stopped: the stage runs again at the next start
			}
			if !last.OK() {
				reason := annotations.ReasonCommandFailed
				switch {
				case last.StartErr != nil:
					reason = annotations.ReasonCommandsNotRun
				case last.TimedOut:
					reason = annotations.ReasonCommandTimedOut
				}
				f := kube.Condition{Status: "False", Reason: reason, Message: capMessage(last.Message())}
				st.Failed = &f
				save()
				a.cmds.set(f, false)
				return false
			}
		}
		return true
	}
	if !st.PreDone {
		if !run(plan.Pre, 0) {
			return none
		}
		st.PreDone = true
		save()
	}
	kubeDone := a.startKube(ctx)
	if !st.PostDone && len(plan.Post) > 0 {
		a.cmds.set(kube.Condition{Status: "Unknown", Reason: annotations.ReasonCommandsRunning,
			Message: fmt.Sprintf("%d preCommands ran; waiting for the node to join before the postCommands", len(plan.Pre))}, false)
		if !a.waitJoined(ctx) {
			return kubeDone
		}
		if !run(plan.Post, len(plan.Pre)) {
			return kubeDone
		}
	}
	st.PostDone = true
	save()
	msg := fmt.Sprintf("ran %d preCommands and %d postCommands", len(plan.Pre), len(plan.Post))
	if last.Command.Name != "" {
		msg += "; the last: " + last.Message()
	}
	a.cmds.set(kube.Condition{Status: "True", Reason: annotations.ReasonCommandsSucceeded, Message: msg}, true)
	a.log.Info().Int("pre", len(plan.Pre)).Int("post", len(plan.Post)).Msg("bootstrap commands done")
	return kubeDone
}

// commandsPending reports whether runSteps has commands to run (and so
// may take a while): none recorded, all done, or a failure recorded mean
// it returns at once.
func (a *Agent) commandsPending() bool {
	if a.cmds.failed() != nil {
		return false
	}
	state := filepath.Join(a.cfg.DataDir, StateDir)
	var plan commandPlan
	var st commandState
	if readJSON(filepath.Join(state, CommandsPlanFile), &plan) != nil || readJSON(filepath.Join(state, CommandsStateFile), &st) != nil {
		return true // runSteps says what is wrong
	}
	return st.Failed == nil && (!st.PreDone && len(plan.Pre) > 0 || !st.PostDone && len(plan.Post) > 0)
}

// runner runs the commands in the machine's root, with $CAPN_ROOT,
// $CAPN_CLUSTER and $CAPN_MACHINE set, every output line to the agent's
// log and CommandsLog.
func (a *Agent) runner() *runcmd.Runner {
	root := filepath.Join(a.cfg.DataDir, RootFS)
	r := &runcmd.Runner{
		Dir:       root,
		Env:       []string{"CAPN_ROOT=" + root, "CAPN_CLUSTER=" + a.cfg.Cluster, "CAPN_MACHINE=" + a.cfg.Machine},
		Log:       a.log.With().Str("component", "bootstrap-commands").Logger(),
		TailLines: conditionTailLines,
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		a.log.Warn().Err(err).Msg("cannot make the machine's root")
	}
	logPath := filepath.Join(a.cfg.DataDir, CommandsLog)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err == nil {
		if f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err == nil {
			r.Output = f // left open for the agent's life: one file
		}
	}
	return r
}

// waitJoined waits until the node serves: with a control plane, until
// its API server is ready (a worker: registered with the cluster);
// without one, at once. false: ctx ended or the control plane failed.
func (a *Agent) waitJoined(ctx context.Context) bool {
	t := time.NewTicker(joinPoll)
	defer t.Stop()
	for {
		ks := a.kube.Load()
		if ks == nil {
			return true
		}
		if ks.ready() {
			return true
		}
		ks.mu.Lock()
		failed := ks.fail != nil
		ks.mu.Unlock()
		if failed {
			a.log.Error().Msg("the control plane failed: the postCommands do not run")
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// readJSON reads path into v; a missing file leaves v as it is.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// unsupported records data the agent cannot run at all (its format) as a
// final failure of the commands: the machine is failed and replaced
// rather than waiting for its startup timeout.
func (a *Agent) unsupported(err error) {
	a.cmds.set(kube.Condition{Status: "False", Reason: annotations.ReasonCommandsNotRun, Message: err.Error()}, false)
}
