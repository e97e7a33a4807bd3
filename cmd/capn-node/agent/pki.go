package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/pki"
)

// Certificates commands, asked by the backup service on
// capn.pki.<cluster>.<machine>.<op> (keys.PKICommand): a CA rotation
// phase, which carries the signing CA's key, and the leaves' check. Only
// this machine may subscribe there (bootstrapper.MachinePermissions).

// PKI command ops (the subject's last token).
const (
	// PKIOpCAPhase applies a CA rotation phase (CertificatesNodeCommand's
	// phase, bundle, signer, intermediate, node client).
	PKIOpCAPhase = "ca-phase"
	// PKIOpLeaves renews the leaves due (renew_before) and lists them all.
	PKIOpLeaves = "leaves"
)

// PKIRuntime is what the certificates commands need of the machine's
// runtime (kube.Runtime).
type PKIRuntime interface {
	ApplyCAPhase(ctx context.Context, p kube.CAPhase) (kube.CAPhaseResult, error)
	RenewLeaves(ctx context.Context, renewBefore time.Duration) (kube.CAPhaseResult, error)
	LeafExpiries() ([]kube.LeafExpiry, error)
}

// servePKI answers the certificates commands until ctx ends.
func (a *Agent) servePKI(ctx context.Context, nc *nats.Conn) (func(), error) {
	var wg sync.WaitGroup
	sub, err := nc.Subscribe(keys.PKICommand(a.cfg.Cluster, a.cfg.Machine, "*"), func(m *nats.Msg) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.onPKI(ctx, m)
		}()
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe(); wg.Wait() }, nil
}

func (a *Agent) pkiRuntime() (PKIRuntime, error) {
	ks := a.kube.Load()
	if ks == nil {
		return nil, fmt.Errorf("machine %s/%s runs no kube-local node", a.cfg.Cluster, a.cfg.Machine)
	}
	ks.mu.Lock()
	fail := ks.fail
	ks.mu.Unlock()
	if fail != nil {
		return nil, fmt.Errorf("the node does not run: %s", fail.Message)
	}
	rt, ok := ks.rt.(PKIRuntime)
	if !ok {
		return nil, fmt.Errorf("machine %s/%s keeps no certificates capn can rotate", a.cfg.Cluster, a.cfg.Machine)
	}
	return rt, nil
}

func (a *Agent) onPKI(ctx context.Context, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	op := m.Subject[strings.LastIndex(m.Subject, ".")+1:]
	reply := &capnv1.CertificatesNodeReply{}
	defer func() {
		data, _ := proto.Marshal(reply)
		if err := m.Respond(data); err != nil {
			a.log.Warn().Err(err).Str("op", op).Msg("cannot answer a certificates command")
		}
	}()
	cmd := &capnv1.CertificatesNodeCommand{}
	if err := proto.Unmarshal(m.Data, cmd); err != nil {
		reply.Error = "the command does not decode: " + err.Error()
		return
	}
	rt, err := a.pkiRuntime()
	if err != nil {
		reply.Error = err.Error()
		return
	}
	var res kube.CAPhaseResult
	switch op {
	case PKIOpCAPhase:
		a.log.Warn().Str("phase", cmd.GetPhase()).Msg("applying a cluster CA rotation phase")
		res, err = rt.ApplyCAPhase(ctx, kube.CAPhase{
			Phase:        cmd.GetPhase(),
			Bundle:       []byte(cmd.GetBundlePem()),
			Signer:       pki.KeyPair{CertPEM: []byte(cmd.GetSigner().GetCertPem()), KeyPEM: []byte(cmd.GetSigner().GetKeyPem())},
			Intermediate: []byte(cmd.GetIntermediatePem()),
			NodeClient:   pki.KeyPair{CertPEM: []byte(cmd.GetNodeClient().GetCertPem()), KeyPEM: []byte(cmd.GetNodeClient().GetKeyPem())},
		})
	case PKIOpLeaves:
		res, err = rt.RenewLeaves(ctx, cmd.GetRenewBefore().AsDuration())
	default:
		err = fmt.Errorf("unknown certificates op %q", op)
	}
	reply.Issued, reply.Restarted = res.Issued, res.Restarted
	if err != nil {
		reply.Error = err.Error()
		return
	}
	leaves, err := rt.LeafExpiries()
	if err != nil {
		reply.Error = "list the certificates: " + err.Error()
		return
	}
	for _, l := range leaves {
		reply.Certificates = append(reply.Certificates, &capnv1.CertificateExpiry{
			Machine: a.cfg.Machine, Name: l.Name, Issuer: l.Issuer,
			NotAfter: timestamppb.New(l.NotAfter), RenewAt: timestamppb.New(pki.RenewAt(l.NotBefore, l.NotAfter, cmd.GetRenewBefore().AsDuration())),
		})
	}
}
