package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/fleet-manager/wave"
)

const rolloutHelp = `
A rollout applies one change to the clusters a label selector picks, in
waves: the first (canary) wave, then waves of growing size, each soaking
Ready and healthy before the next starts. A regression (a cluster not
Ready within --ready-timeout, machines unhealthy above
--max-unhealthy-machines, remediation blocked) halts it with the reason;
a halt is final until resumed. The fleet-manager runs it.

  capn rollout NAME --class C [--revision N] | --kubernetes-version V | --set VAR=VALUE...
               [-l SELECTOR] [--waves 2,10%,50%,100%] [--soak 10m] [--ready-timeout 30m]
  capn rollout -f FILE          a Rollout manifest
  capn rollout status NAME      waves, clusters per state, the halt reason
  capn rollout list
  capn rollout pause|resume|abort NAME

--waves are cumulative: after each wave that many clusters (a count, or a
percentage of the rollout's, rounded up) have the change; the last wave
takes the rest. --revision 0 (the default) is the class's current
revision. Abort is final: moved clusters stay as they are, pending ones
are not touched.

Examples:
  capn rollout to-r2 --class standard -l env=prod --waves 2,10%,50%,100% --soak 10m
  capn rollout status to-r2
  capn rollout resume to-r2
`

func cmdRollout(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn rollout NAME (--class C | --kubernetes-version V | --set K=V) [flags] | -f FILE | status|list|pause|resume|abort", rolloutHelp)
	var a apiFlags
	a.bind(fs)
	var file, class, version, selector, waves string
	var revision int64
	var soak, readyTimeout time.Duration
	var maxUnhealthy string
	var sets multiFlag
	fs.StringVar(&file, "f", "", "a Rollout manifest `file` (YAML or JSON), or - for standard input")
	fs.StringVar(&class, "class", "", "roll out a revision of this ClusterClass")
	fs.Int64Var(&revision, "revision", 0, "the class `revision` (0: its current one)")
	fs.StringVar(&version, "kubernetes-version", "", "roll out this Kubernetes `version` (clusters without a class)")
	fs.Var(&sets, "set", "set a class variable, `NAME=VALUE` (repeatable)")
	fs.StringVar(&selector, "l", "", "label `selector` of the clusters (matchLabels: k=v,k2=v2)")
	fs.StringVar(&waves, "waves", "", "cumulative wave `sizes`, e.g. 2,10%,50%,100% (default 1,100%)")
	fs.DurationVar(&soak, "soak", 0, "how long each wave stays Ready and healthy before the next")
	fs.DurationVar(&readyTimeout, "ready-timeout", 0, "how long a moved cluster may take to be Ready (default 30m)")
	fs.StringVar(&maxUnhealthy, "max-unhealthy-machines", "", "unhealthy machines of a moved cluster (count or %) above which the rollout halts (default 0)")
	const name = "capn rollout"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if len(pos) == 0 && file == "" {
		return reportError(e.stderr, name, nil, usagef("want NAME with a change, -f FILE, or status|list|pause|resume|abort"))
	}
	verb := ""
	if len(pos) > 0 {
		switch pos[0] {
		case "status", "pause", "resume", "abort", "list":
			verb = pos[0]
		}
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	switch verb {
	case "list":
		ros, err := s.c.Rollouts(ctx)
		if err != nil {
			return s.fail(err)
		}
		rows := [][]string{{"NAME", "PHASE", "WAVE", "CHANGE", "MOVED", "HALT REASON"}}
		for _, ro := range ros {
			rows = append(rows, rolloutRow(ro))
		}
		writeTable(e.stdout, rows)
		return daemon.ExitOK
	case "status", "pause", "resume", "abort":
		if len(pos) != 2 {
			return reportError(e.stderr, name, nil, usagef("want %s NAME", verb))
		}
		var ro *capnv1.Rollout
		if verb == "status" {
			ro, err = s.c.Rollout(ctx, pos[1])
		} else {
			ro, err = s.c.RolloutAction(ctx, pos[1], verb)
		}
		if err != nil {
			return s.fail(err)
		}
		if verb != "status" {
			fmt.Fprintf(e.stdout, "rollout/%s %s\n", pos[1], map[string]string{"pause": "paused", "resume": "resumed", "abort": "aborted"}[verb])
			return daemon.ExitOK
		}
		printRolloutStatus(e, ro)
		return daemon.ExitOK
	}
	var data []byte
	if file != "" {
		if len(pos) > 0 || class != "" || version != "" || len(sets) > 0 {
			return reportError(e.stderr, name, nil, usagef("-f takes the whole rollout from the file: no NAME or change flags with it"))
		}
		if data, err = readInput(e, file); err != nil {
			return reportError(e.stderr, name, nil, err)
		}
	} else {
		if len(pos) != 1 {
			return reportError(e.stderr, name, nil, usagef("want one NAME"))
		}
		ro := &capnv1.Rollout{ApiVersion: manifest.APIVersion, Kind: manifest.KindRollout,
			Metadata: &capnv1.ObjectMeta{Name: pos[0]},
			Spec: &capnv1.RolloutSpec{Change: &capnv1.RolloutChange{Class: class, ClassRevision: revision, KubernetesVersion: version},
				MaxUnhealthyMachines: maxUnhealthy}}
		if len(sets) > 0 {
			ro.Spec.Change.Variables = map[string]string{}
			for _, kv := range sets {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return reportError(e.stderr, name, nil, usagef("--set %q: want NAME=VALUE", kv))
				}
				ro.Spec.Change.Variables[k] = v
			}
		}
		if selector != "" {
			ro.Spec.ClusterSelector = &capnv1.LabelSelector{MatchLabels: map[string]string{}}
			for _, kv := range strings.Split(selector, ",") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return reportError(e.stderr, name, nil, usagef("-l %q: want key=value pairs separated by commas (a manifest takes matchExpressions)", selector))
				}
				ro.Spec.ClusterSelector.MatchLabels[k] = v
			}
		}
		if waves != "" {
			ro.Spec.Waves = strings.Split(waves, ",")
		}
		if soak > 0 {
			ro.Spec.Soak = durationpb.New(soak)
		}
		if readyTimeout > 0 {
			ro.Spec.ReadyTimeout = durationpb.New(readyTimeout)
		}
		b, err := protojson.Marshal(ro)
		if err != nil {
			return reportError(e.stderr, name, nil, err)
		}
		data = b
	}
	ro, err := s.c.CreateRollout(ctx, data)
	if err != nil {
		return s.fail(err)
	}
	fmt.Fprintf(e.stdout, "rollout/%s created (%s)\n", ro.GetMetadata().GetName(), describeChange(ro.GetSpec().GetChange()))
	return daemon.ExitOK
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func describeChange(ch *capnv1.RolloutChange) string {
	switch {
	case ch.GetClass() != "":
		return fmt.Sprintf("class %s revision %d", ch.GetClass(), ch.GetClassRevision())
	case ch.GetKubernetesVersion() != "":
		return "Kubernetes " + ch.GetKubernetesVersion()
	}
	var kv []string
	for k, v := range ch.GetVariables() {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return "variables " + strings.Join(kv, ",")
}

func rolloutRow(ro *capnv1.Rollout) []string {
	st := ro.GetStatus()
	phase := st.GetPhase()
	if phase == "" {
		phase = wave.PhasePending
	}
	moved, total := 0, 0
	for _, c := range st.GetClusters() {
		if c.GetState() == wave.ClusterSkipped {
			continue
		}
		total++
		if c.GetState() != wave.ClusterPending {
			moved++
		}
	}
	w := "-"
	if n := len(st.GetWaves()); n > 0 {
		w = fmt.Sprintf("%d/%d", st.GetCurrentWave()+1, n)
	}
	return []string{ro.GetMetadata().GetName(), phase, w, describeChange(ro.GetSpec().GetChange()), fmt.Sprintf("%d/%d", moved, total), orNone(st.GetHaltReason())}
}

// printRolloutStatus prints capn rollout status: the phase, the halt
// reason, each wave with its clusters per state, and the clusters with a
// message.
func printRolloutStatus(e env, ro *capnv1.Rollout) {
	st := ro.GetStatus()
	w := e.stdout
	r := rolloutRow(ro)
	fmt.Fprintf(w, "Rollout:  %s\nChange:   %s\nPhase:    %s\nMoved:    %s clusters\n", r[0], r[3], r[1], r[4])
	if st.GetHaltReason() != "" {
		fmt.Fprintf(w, "Halted:   %s\n", st.GetHaltReason())
	}
	if ro.GetSpec().GetPaused() {
		fmt.Fprintln(w, "Paused:   yes (capn rollout resume)")
	}
	if st.GetNextWindow() != nil {
		fmt.Fprintf(w, "Window:   the next cluster waits for its maintenance window (opens %s)\n", st.GetNextWindow().AsTime().Format(time.RFC3339))
	}
	states := map[string]map[int32]int{}
	for _, c := range st.GetClusters() {
		if states[c.GetState()] == nil {
			states[c.GetState()] = map[int32]int{}
		}
		states[c.GetState()][c.GetWave()]++
	}
	rows := [][]string{{"WAVE", "STATE", "CLUSTERS", "PENDING", "MOVING", "READY", "DONE", "SKIPPED"}}
	for _, wv := range st.GetWaves() {
		i := wv.GetIndex()
		rows = append(rows, []string{fmt.Sprint(i + 1), wv.GetState(), fmt.Sprint(len(wv.GetClusters())),
			fmt.Sprint(states[wave.ClusterPending][i]), fmt.Sprint(states[wave.ClusterMoving][i]),
			fmt.Sprint(states[wave.ClusterReady][i]), fmt.Sprint(states[wave.ClusterDone][i]), fmt.Sprint(states[wave.ClusterSkipped][i])})
	}
	if len(st.GetWaves()) > 0 {
		fmt.Fprintln(w)
		writeTable(w, rows)
	}
	var notes [][]string
	for _, c := range st.GetClusters() {
		if c.GetMessage() != "" {
			notes = append(notes, []string{c.GetName(), c.GetState(), c.GetMessage()})
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		writeTable(w, append([][]string{{"CLUSTER", "STATE", "MESSAGE"}}, notes...))
	}
}
