package backup

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/kubeconfig"
	"github.com/capn-dev/capn/secrets/pki"
)

// Cluster CA rotation (issue 22, R12), for clusters whose control plane
// capn runs (kube-local). The backup service drives it because it already
// commands every machine's node agent for etcd snapshots and holds the
// secrets bucket's key; the pure phase logic is pki.Rotation.
//
//	rotate-ca ─► new CA, cross-signed by the old; state in the cluster's
//	             sealed PKI record (secrets pki.<cluster>, ca_rotation)
//	TrustBoth ─► each machine, one at a time: trust old+new (ca-phase)
//	advance   ─► the cluster CA (PartCA) becomes the new one; the admin
//	             kubeconfig is the new CA's, trusting both
//	Reissue   ─► each machine: every leaf from the new CA
//	advance   ─► the admin kubeconfig trusts the new CA alone
//	RemoveOld ─► each machine: the old CA leaves every bundle
//	advance   ─► Done; the old CA's key is dropped
//
// Every step is written before the next begins, so a rotation that stops
// (a machine down, the service restarted) resumes where it stopped with
// `capn rotate-ca CLUSTER --continue`; a phase asked of a machine again
// changes nothing there.

// Verb and node ops of CA rotation.
const (
	VerbRotateCA = "rotate-ca"
	opCAPhase    = "ca-phase"
	opLeaves     = "leaves"
	// CodeConflict: a rotation runs already (409).
	CodeConflict = "conflict"
)

// The CARotation condition's reasons and the status's states.
const (
	ConditionCARotation        = "CARotation"
	ConditionCertificatesReady = "CertificatesReady"
	StateRunning               = "Running"
	StateHeld                  = "Held"
	StateFailed                = "Failed"
	StateComplete              = "Complete"
)

// caPhaseWait bounds one machine's phase (files, restarts, and the API
// server's reload of its files, which it checks every minute).
const caPhaseWait = 3 * time.Minute

// caCluster is a cluster a rotation can run on: its machines, control
// planes first.
type caCluster struct {
	name     string
	machines []string
	workers  map[string]bool
	spec     *capnv1.CertificatesSpec
}

func (s *Service) caClusterOf(ctx context.Context, cluster string) (*caCluster, *capnv1.BackupError) {
	c, cps, ws, berr := s.kubeLocalCluster(ctx, cluster, "to open the cluster's PKI", "CA rotation needs")
	if berr != nil {
		return nil, berr
	}
	cc := &caCluster{name: cluster, workers: map[string]bool{}, spec: c.GetSpec().GetCertificates(), machines: append(cps, ws...)}
	for _, w := range ws {
		cc.workers[w] = true
	}
	return cc, nil
}

// onRotateCA answers capn.backup.rotate-ca.
func (s *Service) onRotateCA(ctx context.Context, data []byte) proto.Message {
	req := &capnv1.CARotationRequest{}
	if err := proto.Unmarshal(data, req); err != nil {
		return &capnv1.CARotationResult{Error: refuse(CodeInvalid, "the request does not decode: "+err.Error())}
	}
	cluster := req.GetCluster()
	log := s.log.With().Str("cluster", cluster).Str("requested_by", req.GetRequestedBy()).Bool("continue", req.GetContinue()).Logger()
	until, err := pki.ParseRotationPhase(req.GetUntil())
	if err != nil {
		return &capnv1.CARotationResult{Error: refuse(CodeInvalid, "until: "+err.Error())}
	}
	cc, berr := s.caClusterOf(ctx, cluster)
	if berr != nil {
		return &capnv1.CARotationResult{Error: berr}
	}
	if _, busy := s.caRotating.LoadOrStore(cluster, true); busy {
		phase := "starting"
		if st, _, err := s.caStatus.Get(ctx, keys.CARotationStatus(cluster)); err == nil {
			phase = st.GetPhase()
		}
		return &capnv1.CARotationResult{Error: refuse(CodeConflict, fmt.Sprintf("a CA rotation of cluster %s is running now (phase %s): wait for it, then see capn describe cluster %s", cluster, phase, cluster))}
	}
	defer s.caRotating.Delete(cluster)
	st, berr := s.rotateCA(log.WithContext(ctx), cc, req, until)
	if berr != nil {
		log.Warn().Str("code", berr.GetCode()).Str("error", berr.GetMessage()).Msg("CA rotation refused or stopped")
	}
	return &capnv1.CARotationResult{Status: st, Error: berr}
}

// pkiBucket is the sealed PKI records (secrets pki.<cluster>).
func (s *Service) pkiBucket() *store.Bucket[*capnv1.ClusterPKI] {
	return store.NewBucket(s.kv[events.BucketSecrets], store.New[capnv1.ClusterPKI](), store.WithSealer(s.cfg.Keyring))
}

func (s *Service) kubeconfigBucket() *store.Bucket[*capnv1.AdminKubeconfig] {
	return store.NewBucket(s.kv[events.BucketSecrets], store.New[capnv1.AdminKubeconfig](), store.WithSealer(s.cfg.Keyring))
}

func pairOf(p *capnv1.CertificatePair) pki.KeyPair {
	return pki.KeyPair{CertPEM: []byte(p.GetCertPem()), KeyPEM: []byte(p.GetKeyPem())}
}

func protoPair(kp pki.KeyPair) *capnv1.CertificatePair {
	return &capnv1.CertificatePair{CertPem: string(kp.CertPEM), KeyPem: string(kp.KeyPEM)}
}

// rotateCA starts or continues the cluster's rotation and runs it until
// it is done, held (until) or a machine fails.
func (s *Service) rotateCA(ctx context.Context, cc *caCluster, req *capnv1.CARotationRequest, until pki.RotationPhase) (*capnv1.CARotationStatus, *capnv1.BackupError) {
	log := zerolog.Ctx(ctx)
	pkis := s.pkiBucket()
	key := keys.PKI(cc.name)
	cur, _, err := pkis.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, refuse(CodeUnavailable, "cluster "+cc.name+" has no PKI yet (the bootstrapper makes it when the cluster is created)")
	}
	if err != nil {
		return nil, refuse(CodeInternal, "open the cluster's PKI: "+err.Error())
	}
	state := cur.GetCaRotation()
	running := state != nil && state.GetPhase() != "" && state.GetPhase() != string(pki.PhaseDone)
	now := s.cfg.Now()
	switch {
	case running && !req.GetContinue():
		return s.statusOf(cc, state, StateHeld, ""), refuse(CodeConflict, fmt.Sprintf("a CA rotation of cluster %s is in phase %s (%d of %d machines done, started %s): capn rotate-ca %s --continue resumes it",
			cc.name, state.GetPhase(), len(state.GetDone()), len(cc.machines), state.GetStarted().AsTime().UTC().Format(time.RFC3339), cc.name))
	case !running && req.GetContinue():
		return nil, refuse(CodeInvalid, "continue: no CA rotation of cluster "+cc.name+" is under way (capn rotate-ca "+cc.name+" starts one)")
	case !running:
		if cur.GetUserSuppliedCa() {
			return nil, refuse(CodeInvalid, "cluster "+cc.name+": its CA was supplied by the user (spec.bootstrap.ca): capn does not replace it")
		}
		oldCA, err := pki.ParseCA(pki.KeyPair{CertPEM: []byte(cur.GetCa().GetCertPem()), KeyPEM: []byte(cur.GetCa().GetKeyPem())}, now)
		if err != nil {
			return nil, refuse(CodeInternal, "the cluster CA: "+err.Error())
		}
		next, err := pki.NewRotationCA(now)
		if err != nil {
			return nil, refuse(CodeInternal, err.Error())
		}
		cross, err := pki.CrossSign(oldCA, next, now)
		if err != nil {
			return nil, refuse(CodeInternal, err.Error())
		}
		state = &capnv1.CARotationState{Phase: string(pki.PhaseTrust), OldCa: protoPair(oldCA.Pair), NewCa: protoPair(next),
			CrossSignedPem: string(cross), Started: timestamppb.New(now), RequestedBy: req.GetRequestedBy()}
		log.Warn().Strs("machines", cc.machines).Msg("CA rotation starts")
		s.caEvent(ctx, cc, state, "started", "CA rotation started by "+req.GetRequestedBy())
	}
	state.Until = string(until)
	state.Error = ""
	if err := s.saveRotation(ctx, cc.name, state, nil); err != nil {
		return nil, refuse(CodeInternal, err.Error())
	}
	for {
		r := pki.Rotation{Phase: pki.RotationPhase(state.GetPhase()), Done: state.GetDone()}
		step := r.Next(cc.machines, until)
		switch step.Kind {
		case pki.StepMachine:
			s.writeCAStatus(ctx, cc.name, s.statusOf(cc, state, StateRunning, fmt.Sprintf("phase %s on machine %s", step.Phase, step.Machine)))
			reply, err := s.applyPhase(ctx, cc, state, step.Machine)
			if err != nil {
				state.Error = fmt.Sprintf("phase %s on machine %s: %v", step.Phase, step.Machine, err)
				_ = s.saveRotation(ctx, cc.name, state, nil)
				st := s.statusOf(cc, state, StateFailed, state.Error+" (the rotation stopped there; capn rotate-ca "+cc.name+" --continue retries)")
				s.writeCAStatus(ctx, cc.name, st)
				s.caEvent(ctx, cc, state, "failed", st.GetMessage())
				return st, refuse(CodeInternal, st.GetMessage())
			}
			log.Info().Str("phase", string(step.Phase)).Str("machine", step.Machine).Strs("issued", reply.GetIssued()).Strs("restarted", reply.GetRestarted()).Msg("CA rotation phase done on a machine")
			state.Done = r.MachineDone(step.Machine).Done
			if err := s.saveRotation(ctx, cc.name, state, nil); err != nil {
				return nil, refuse(CodeInternal, err.Error())
			}
		case pki.StepAdvance:
			if err := s.advance(ctx, cc, state); err != nil {
				return nil, refuse(CodeInternal, err.Error())
			}
		case pki.StepHold:
			st := s.statusOf(cc, state, StateHeld, fmt.Sprintf("phase %s done on every machine; held as asked: capn rotate-ca %s --continue goes on", state.GetPhase(), cc.name))
			s.writeCAStatus(ctx, cc.name, st)
			s.caEvent(ctx, cc, state, "held", st.GetMessage())
			return st, nil
		case pki.StepComplete:
			st := s.statusOf(cc, state, StateComplete, "the cluster CA was rotated: every machine trusts and uses the new CA alone")
			s.writeCAStatus(ctx, cc.name, st)
			s.caEvent(ctx, cc, state, "completed", st.GetMessage())
			log.Warn().Msg("CA rotation complete")
			if _, err := s.checkCertificates(ctx, cc); err != nil {
				log.Warn().Err(err).Msg("certificate check after the rotation")
			}
			return st, nil
		}
	}
}

// advance ends the phase under way on every machine and begins the next,
// with what the deployment's own records must say from then on.
func (s *Service) advance(ctx context.Context, cc *caCluster, state *capnv1.CARotationState) error {
	from := pki.RotationPhase(state.GetPhase())
	r := pki.Rotation{Phase: from}.Advance()
	now := s.cfg.Now()
	old, next := pairOf(state.GetOldCa()), pairOf(state.GetNewCa())
	var pkiChange func(*capnv1.ClusterPKI)
	switch r.Phase {
	case pki.PhaseReissue:
		// From here on the new CA signs: the cluster CA is the new one
		// (bootstrap data of machines made from now on, the kubeconfig the
		// bootstrapper renews), and the admin kubeconfig trusts both.
		pkiChange = func(p *capnv1.ClusterPKI) {
			p.Ca = &capnv1.KeyPairPEM{CertPem: string(next.CertPEM), KeyPem: string(next.KeyPEM)}
		}
		if err := s.rewriteKubeconfig(ctx, cc.name, next, pki.Bundle(old.CertPEM, next.CertPEM), now); err != nil {
			return err
		}
	case pki.PhaseRemoveOld:
		if err := s.rewriteKubeconfig(ctx, cc.name, next, next.CertPEM, now); err != nil {
			return err
		}
	case pki.PhaseDone:
		// The old CA's key is of no more use: drop it.
		state.OldCa = &capnv1.CertificatePair{CertPem: state.GetOldCa().GetCertPem()}
		state.CrossSignedPem = ""
	}
	state.Phase, state.Done = string(r.Phase), nil
	if err := s.saveRotation(ctx, cc.name, state, pkiChange); err != nil {
		return err
	}
	s.caEvent(ctx, cc, state, "phase-"+strings.ToLower(string(from))+"-done", fmt.Sprintf("phase %s done on every machine (%s); next %s", from, strings.Join(cc.machines, ", "), r.Phase))
	return nil
}

// saveRotation writes the rotation's state into the cluster's PKI record
// (compare-and-set), with change applied to the record too.
func (s *Service) saveRotation(ctx context.Context, cluster string, state *capnv1.CARotationState, change func(*capnv1.ClusterPKI)) error {
	state.Updated = timestamppb.New(s.cfg.Now())
	_, _, err := s.pkiBucket().Mutate(ctx, keys.PKI(cluster), func(cur *capnv1.ClusterPKI, exists bool) (*capnv1.ClusterPKI, error) {
		if !exists {
			return nil, fmt.Errorf("the PKI of cluster %s is gone", cluster)
		}
		cur.CaRotation = proto.CloneOf(state)
		if change != nil {
			change(cur)
		}
		return cur, nil
	})
	if err != nil {
		return fmt.Errorf("save the CA rotation of %s: %w", cluster, err)
	}
	return nil
}

// rewriteKubeconfig makes the admin kubeconfig (secrets kubeconfig.<c>,
// what capn kubeconfig and the gateway hand out) the signer's, trusting
// bundle.
func (s *Service) rewriteKubeconfig(ctx context.Context, cluster string, signer pki.KeyPair, bundle []byte, now time.Time) error {
	_, _, err := s.kubeconfigBucket().Mutate(ctx, keys.Kubeconfig(cluster), func(cur *capnv1.AdminKubeconfig, exists bool) (*capnv1.AdminKubeconfig, error) {
		if !exists {
			return nil, store.ErrNoChange // the bootstrapper writes it with the cluster CA once there is an endpoint
		}
		host, port, err := splitServer(cur.GetServer())
		if err != nil {
			return nil, err
		}
		ca, err := pki.ParseCA(signer, now)
		if err != nil {
			return nil, err
		}
		admin, err := pki.IssueAdmin(ca, now)
		if err != nil {
			return nil, err
		}
		cert, err := pki.ParseCertificate(admin.CertPEM)
		if err != nil {
			return nil, err
		}
		data, err := kubeconfig.Render(kubeconfig.Input{ClusterName: cluster, Host: host, Port: port,
			CACertPEM: bundle, ClientCertPEM: admin.CertPEM, ClientKeyPEM: admin.KeyPEM})
		if err != nil {
			return nil, err
		}
		return &capnv1.AdminKubeconfig{Kubeconfig: data, Server: cur.GetServer(), ClientCertNotAfter: timestamppb.New(cert.NotAfter)}, nil
	})
	if err != nil {
		return fmt.Errorf("rewrite the admin kubeconfig of %s: %w", cluster, err)
	}
	return nil
}

func splitServer(server string) (string, int32, error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", 0, fmt.Errorf("kubeconfig server %q: %w", server, err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", 0, fmt.Errorf("kubeconfig server %q: %w", server, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("kubeconfig server %q: port: %w", server, err)
	}
	return host, int32(p), nil
}

// applyPhase sends the phase under way to machine and waits for it.
func (s *Service) applyPhase(ctx context.Context, cc *caCluster, state *capnv1.CARotationState, machine string) (*capnv1.CertificatesNodeReply, error) {
	phase := pki.RotationPhase(state.GetPhase())
	m, err := pki.MaterialFor(phase, pairOf(state.GetOldCa()), pairOf(state.GetNewCa()), []byte(state.GetCrossSignedPem()))
	if err != nil {
		return nil, err
	}
	cmd := &capnv1.CertificatesNodeCommand{Phase: string(phase), BundlePem: string(m.Bundle), IntermediatePem: string(m.Intermediate),
		Signer: protoPair(m.Signer), RenewBefore: cc.spec.GetRenewBefore()}
	if cc.workers[machine] {
		// A worker trusts; it never signs: the certificate alone.
		cmd.Signer = &capnv1.CertificatePair{CertPem: string(m.Signer.CertPEM)}
		if phase == pki.PhaseReissue {
			ca, err := pki.ParseCA(m.Signer, s.cfg.Now())
			if err != nil {
				return nil, err
			}
			kp, err := pki.IssueLeaf(ca, pki.LeafRequest{CommonName: "system:node:" + machine, Organization: []string{"system:nodes"},
				Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, s.cfg.Now())
			if err != nil {
				return nil, err
			}
			cmd.NodeClient = protoPair(kp)
		}
	}
	return s.pkiCommand(ctx, cc.name, machine, opCAPhase, cmd, caPhaseWait)
}

// pkiCommand sends one certificates command to machine's agent.
func (s *Service) pkiCommand(ctx context.Context, cluster, machine, op string, cmd *capnv1.CertificatesNodeCommand, timeout time.Duration) (*capnv1.CertificatesNodeReply, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := s.nc.RequestWithContext(ctx, keys.PKICommand(cluster, machine, op), mustMarshal(cmd))
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, errors.New("no agent answers (the machine is down or runs no capn-node)")
	}
	if err != nil {
		return nil, err
	}
	reply := &capnv1.CertificatesNodeReply{}
	if err := proto.Unmarshal(m.Data, reply); err != nil {
		return nil, fmt.Errorf("the answer does not decode: %w", err)
	}
	if reply.GetError() != "" {
		return reply, errors.New(reply.GetError())
	}
	return reply, nil
}

// statusOf is the operator's view of state.
func (s *Service) statusOf(cc *caCluster, state *capnv1.CARotationState, st, msg string) *capnv1.CARotationStatus {
	out := &capnv1.CARotationStatus{Phase: state.GetPhase(), State: st, Message: msg, Done: state.GetDone(), Machines: cc.machines,
		Started: state.GetStarted(), Updated: timestamppb.New(s.cfg.Now())}
	out.OldCaHash, _ = pki.CACertHash([]byte(state.GetOldCa().GetCertPem()))
	out.NewCaHash, _ = pki.CACertHash([]byte(state.GetNewCa().GetCertPem()))
	cond := &capnv1.Condition{Type: ConditionCARotation, Status: "False", Reason: st, Message: msg, LastTransitionTime: out.Updated}
	switch st {
	case StateComplete:
		cond.Status = "True"
	case StateFailed:
		cond.Severity = "Error"
	default:
		cond.Severity = "Info"
	}
	cond.Reason = st + string(pki.RotationPhase(state.GetPhase()))
	if st == StateComplete {
		cond.Reason = "Rotated"
	}
	out.Condition = cond
	return out
}

// writeCAStatus keeps observed backup.ca-<cluster>; a failure to write it
// is logged (the rotation's state is the PKI record's).
func (s *Service) writeCAStatus(ctx context.Context, cluster string, st *capnv1.CARotationStatus) {
	if _, _, err := s.caStatus.Mutate(ctx, keys.CARotationStatus(cluster), func(_ *capnv1.CARotationStatus, _ bool) (*capnv1.CARotationStatus, error) {
		return st, nil
	}); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Msg("CA rotation status not written")
	}
}

// caEvent publishes a fact of the rotation (capn.evt.certificates.<what>.<cluster>._).
func (s *Service) caEvent(ctx context.Context, cc *caCluster, state *capnv1.CARotationState, what, msg string) {
	st := s.statusOf(cc, state, "", msg)
	id := fmt.Sprintf("ca-rotation-%s-%d-%s", cc.name, state.GetStarted().AsTime().UnixMilli(), what)
	if _, err := s.pub.Publish(ctx, events.EventSubject(CertificatesEntity, what, cc.name, keys.ClusterObject), CertificatesEventType+what, id, st); err != nil {
		zerolog.Ctx(ctx).Warn().Err(err).Str("event", what).Msg("CA rotation event not published")
	}
}

// Events of CA rotation and leaf renewal.
const (
	CertificatesEntity    = "certificates"
	CertificatesEventType = "dev.capn.certificates."
)
