package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/keys"
)

// Lifecycle hooks (docs/operations.md, Lifecycle hooks): an annotation
// annotations.PreDrainHookPrefix or PreTerminateHookPrefix + <name> on a
// desired machine, whose value is the holder. The gateway is a second
// writer of desired machines, for these annotations only (and
// deletion_timestamp, delete.go), each write a compare-and-set; the
// machine-manager reads them and holds a deleting machine until they are
// gone.

// The machine-manager's conditions while a deleting machine waits for its
// hooks (set by its Step, read here for the hook list's "holding").
const (
	condPreDrainHook     = "PreDrainDeleteHookSucceeded"
	condPreTerminateHook = "PreTerminateDeleteHookSucceeded"
	reasonWaitingHook    = "WaitingExternalHook"
)

// Timeline reasons of the facts the hook endpoints publish
// (capn.evt.machine.hook.<cluster>.<machine>).
const (
	ReasonHookAdded    = "HookAdded"
	ReasonHookReleased = "HookReleased"
	hookEventWhat      = "hook"
)

// maxHolderLen bounds a holder (an annotation value), as a DNS subdomain.
const maxHolderLen = 253

// hookName is a Kubernetes annotation name segment (the part after the
// prefix's '/'): at most 63 characters, checked apart.
var hookName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// hookPrefix is the annotation prefix of a phase; false for another phase.
func hookPrefix(phase string) (string, bool) {
	switch phase {
	case api.HookPreDrain:
		return annotations.PreDrainHookPrefix, true
	case api.HookPreTerminate:
		return annotations.PreTerminateHookPrefix, true
	}
	return "", false
}

// checkHook validates a hook's phase, name and holder, each error on its
// field (paths: the request's field names, or the path and query
// parameters' for a release), all at once.
func checkHook(phase, name, holder string, paths [3]string) error {
	p := badRequest("the hook is not valid")
	if _, ok := hookPrefix(phase); !ok {
		p.withField(paths[0], `must be "pre-drain" or "pre-terminate"`, phase)
	}
	switch {
	case name == "":
		p.withField(paths[1], "required: the hook's name", nil)
	case len(name) > 63 || !hookName.MatchString(name):
		p.withField(paths[1], "must be an annotation name: at most 63 characters, letters, digits, '-', '_' and '.', starting and ending with a letter or digit", name)
	}
	if reason := holderProblem(holder); reason != "" {
		p.withField(paths[2], reason, holder)
	}
	if len(p.Errors) > 0 {
		if len(p.Errors) == 1 {
			p.Detail = fmt.Sprintf("%s: %s", p.Errors[0].Path, p.Errors[0].Reason)
		}
		return p
	}
	return nil
}

func holderProblem(holder string) string {
	switch {
	case holder == "":
		return "required: who holds the hook"
	case len(holder) > maxHolderLen:
		return "must be at most " + strconv.Itoa(maxHolderLen) + " characters"
	case strings.IndexFunc(holder, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0:
		return "must be printable, without spaces"
	}
	return ""
}

// addHook is POST /v1/clusters/{name}/machines/{machine}/hooks
// {phase, name, holder}: sets the hook's annotation on the desired machine
// with a compare-and-set. 201 with the hook when it was added; 200 when
// the same holder already holds it (nothing written); 409 naming the
// holder when another holds it.
func (s *server) addHook(w http.ResponseWriter, r *http.Request) error {
	cluster, machine, err := machinePath(r)
	if err != nil {
		return err
	}
	var req api.HookRequest
	if err := readJSON(r, &req, false); err != nil {
		return err
	}
	if req.Holder == "" {
		req.Holder = principalFrom(r.Context()).name
	}
	if err := checkHook(req.Phase, req.Name, req.Holder, [3]string{"phase", "name", "holder"}); err != nil {
		return err
	}
	prefix, _ := hookPrefix(req.Phase)
	key := prefix + req.Name
	added := false // by the last call of the mutation, the one that counts
	m, rev, err := s.machines.Mutate(r.Context(), keys.Machine(cluster, machine), func(m *capnv1.Machine, exists bool) (*capnv1.Machine, error) {
		added = false
		if !exists {
			return nil, machineNotFound(cluster, machine)
		}
		md := ensure(&m.Metadata)
		switch holder, held := md.GetAnnotations()[key]; {
		case held && holder == req.Holder:
			return nil, store.ErrNoChange
		case held:
			return nil, conflict("%s hook %s of machine %s is held by %s; only its holder releases it (or a release with force)",
				req.Phase, req.Name, machine, holder).withField("name", "held by "+holder, req.Name)
		}
		if md.Annotations == nil {
			md.Annotations = map[string]string{}
		}
		md.Annotations[key] = req.Holder
		added = true
		return m, nil
	})
	if err != nil {
		return err
	}
	h := api.Hook{Machine: machine, Phase: req.Phase, Name: req.Name, Holder: req.Holder, Annotation: key}
	status := http.StatusOK
	if added {
		status = http.StatusCreated
		s.hookEvent(r.Context(), cluster, machine, m.GetMetadata().GetUid(), rev, ReasonHookAdded,
			fmt.Sprintf("%s hook %s added by %s: the machine's deletion waits %s until it is released", req.Phase, req.Name, req.Holder, hookWhere(req.Phase)))
	}
	st, err := s.statusOf(r.Context(), cluster, machine)
	if err != nil {
		return err
	}
	h.MachinePhase = st.GetPhase()
	h.Holding = holding(st, req.Phase)
	writeJSON(w, status, h)
	return nil
}

func hookWhere(phase string) string {
	if phase == api.HookPreDrain {
		return "before its Node is drained"
	}
	return "before its infrastructure is deleted"
}

// releaseHook is DELETE
// /v1/clusters/{name}/machines/{machine}/hooks/{phase}/{hook}[?holder=][&force=true]:
// removes the hook's annotation with a compare-and-set, when the holder
// (default: the token's name) holds it, or with force=true whoever does.
// 200 with the released hook; 404 when the machine has no such hook; 409
// naming the holder when another holds it.
func (s *server) releaseHook(w http.ResponseWriter, r *http.Request) error {
	cluster, machine, err := machinePath(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	phase, name := r.PathValue("phase"), r.PathValue("hook")
	holder := q.Get(api.ParamHolder)
	if holder == "" {
		holder = principalFrom(r.Context()).name
	}
	force := false
	if f := q.Get(api.ParamForce); f != "" {
		if force, err = strconv.ParseBool(f); err != nil {
			return badRequest("force is not a boolean").withField(api.ParamForce, "must be true or false", f)
		}
	}
	if err := checkHook(phase, name, holder, [3]string{"phase", "hook", api.ParamHolder}); err != nil {
		return err
	}
	prefix, _ := hookPrefix(phase)
	key := prefix + name
	var released string
	m, rev, err := s.machines.Mutate(r.Context(), keys.Machine(cluster, machine), func(m *capnv1.Machine, exists bool) (*capnv1.Machine, error) {
		if !exists {
			return nil, machineNotFound(cluster, machine)
		}
		cur, held := m.GetMetadata().GetAnnotations()[key]
		switch {
		case !held:
			have := annotations.Hooks(m.GetMetadata().GetAnnotations(), prefix)
			return nil, notFound("machine %s has no %s hook %s (its %s hooks: %s)", machine, phase, name, phase, listOrNone(have))
		case cur != holder && !force:
			return nil, conflict("%s hook %s of machine %s is held by %s, not %s: release it as its holder (holder=%s), or with force=true (capn hook release --force)",
				phase, name, machine, cur, holder, cur).withField(api.ParamHolder, "the hook is held by "+cur, holder)
		}
		released = cur
		delete(m.Metadata.Annotations, key)
		return m, nil
	})
	if err != nil {
		return err
	}
	by := holder
	if released != holder {
		by = fmt.Sprintf("%s (held by %s, forced)", holder, released)
	}
	s.hookEvent(r.Context(), cluster, machine, m.GetMetadata().GetUid(), rev, ReasonHookReleased,
		fmt.Sprintf("%s hook %s released by %s", phase, name, by))
	st, err := s.statusOf(r.Context(), cluster, machine)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.Hook{Machine: machine, Phase: phase, Name: name, Holder: released, Annotation: key, MachinePhase: st.GetPhase()})
	return nil
}

// listHooks is GET /v1/clusters/{name}/hooks: every hook of the cluster's
// desired machines, sorted by machine, phase (in deletion order) and name,
// each with whether it holds a deletion now. 404 when the cluster does not
// exist and has no machine left.
func (s *server) listHooks(w http.ResponseWriter, r *http.Request) error {
	cluster, err := pathName(r, "name")
	if err != nil {
		return err
	}
	ctx := r.Context()
	prefix := keys.MachinesOf(cluster)
	desired, bad, err := s.machines.ListSkipping(ctx, prefix)
	if err != nil {
		return err
	}
	s.skipped(w, r, api.KindMachine, bad)
	if len(desired) == 0 && len(bad) == 0 {
		if _, _, err := s.clusters.Get(ctx, keys.Cluster(cluster)); errors.Is(err, store.ErrNotFound) {
			return notFound("cluster %s not found", cluster)
		} else if err != nil && !errors.Is(err, store.ErrCorrupt) {
			return err
		}
	}
	out := api.HookList{Items: []api.Hook{}}
	for _, e := range desired { // sorted by key: by machine
		machine := strings.TrimPrefix(e.Key, prefix)
		ann := e.Value.GetMetadata().GetAnnotations()
		var st *capnv1.MachineStatus
		for _, phase := range api.HookPhases {
			p, _ := hookPrefix(phase)
			for _, name := range annotations.Hooks(ann, p) {
				if st == nil {
					if st, err = s.statusOf(ctx, cluster, machine); err != nil {
						return err
					}
				}
				out.Items = append(out.Items, api.Hook{Machine: machine, Phase: phase, Name: name, Holder: ann[p+name],
					Annotation: p + name, Holding: holding(st, phase), MachinePhase: st.GetPhase()})
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// holding: the machine is being deleted and waits for its hooks of phase.
func holding(st *capnv1.MachineStatus, phase string) bool {
	if st.GetPhaseValue() != capnv1.MachineDeleting {
		return false
	}
	typ := condPreDrainHook
	if phase == api.HookPreTerminate {
		typ = condPreTerminateHook
	}
	c := conditions.Get(st.GetConditions(), typ)
	return c.GetStatusValue() == capnv1.ConditionFalse && c.GetReason() == reasonWaitingHook
}

// statusOf reads a machine's observed status; an empty one when there is
// none (not made yet) or it does not decode (logged).
func (s *server) statusOf(ctx context.Context, cluster, machine string) (*capnv1.MachineStatus, error) {
	st, _, err := s.machineStatuses.Get(ctx, keys.Machine(cluster, machine))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &capnv1.MachineStatus{}, nil
	case errors.Is(err, store.ErrCorrupt):
		zerolog.Ctx(ctx).Warn().Err(err).Str("cluster", cluster).Str("machine", machine).Msg("machine status does not decode; answered without it")
		return &capnv1.MachineStatus{}, nil
	}
	return st, err
}

// hookEvent records a hook added or released on the cluster's timeline
// (capn.evt.machine.hook.<cluster>.<machine>), with an id per write (the
// machine record's revision): a retried publish is stored once. Best
// effort, as the remediator's: the annotation is the truth; a failure is
// logged.
func (s *server) hookEvent(ctx context.Context, cluster, machine, uid string, rev uint64, reason, msg string) {
	ev := &capnv1.MachineEvent{Cluster: cluster, Machine: machine, Reason: reason, Message: msg}
	id := fmt.Sprintf("hook.%s.%s.%s.%s.%d", strings.ToLower(reason), cluster, machine, uid, rev)
	if _, err := s.pub.Publish(ctx, events.EventSubject("machine", hookEventWhat, cluster, machine), events.TypeMachineEvent+"."+hookEventWhat, id, ev,
		events.WithSubject(machine)); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Str("cluster", cluster).Str("machine", machine).Str("reason", reason).Msg("publish hook event")
	}
}

// machinePath reads the {name} and {machine} path values.
func machinePath(r *http.Request) (cluster, machine string, err error) {
	if cluster, err = pathName(r, "name"); err != nil {
		return "", "", err
	}
	if machine, err = pathName(r, "machine"); err != nil {
		return "", "", err
	}
	return cluster, machine, nil
}

func machineNotFound(cluster, machine string) *problemError {
	return notFound("machine %s of cluster %s not found", machine, cluster)
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(slices.Clone(names), ", ")
}
