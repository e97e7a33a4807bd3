package agent

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/events/natstest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// fakePKI is a runtime that records the phases and renewals it is given.
type fakePKI struct {
	mu     sync.Mutex
	phases []kube.CAPhase
	renew  []time.Duration
	fail   error
}

func (f *fakePKI) Run(context.Context) error             { return nil }
func (f *fakePKI) Ready() bool                           { return true }
func (f *fakePKI) Condition() (kube.Condition, int)      { return kube.Condition{Status: "True"}, 1 }
func (f *fakePKI) EtcdConditions() []kube.NamedCondition { return nil }
func (f *fakePKI) ApplyCAPhase(_ context.Context, p kube.CAPhase) (kube.CAPhaseResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.phases = append(f.phases, p)
	return kube.CAPhaseResult{Issued: []string{"apiserver"}, Restarted: []string{"kwok"}}, f.fail
}
func (f *fakePKI) RenewLeaves(_ context.Context, d time.Duration) (kube.CAPhaseResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renew = append(f.renew, d)
	return kube.CAPhaseResult{}, nil
}
func (f *fakePKI) LeafExpiries() ([]kube.LeafExpiry, error) {
	nb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return []kube.LeafExpiry{{Name: "apiserver", Issuer: "kubernetes", NotBefore: nb, NotAfter: nb.Add(90 * time.Hour)}}, nil
}

// The agent hands a phase's material to its runtime as sent, answers with
// what the runtime did and the leaves' expiry (renewal at two thirds, or
// renewBefore ahead), and answers an error for an unknown op, a failing
// phase, or a machine that runs no kube-local node.
func TestServePKI(t *testing.T) {
	ns := natstest.Start(t)
	nc, _ := ns.Connect(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := &Agent{cfg: Config{Cluster: "c1", Machine: "m1"}, log: zerolog.Nop()}
	stop, err := a.servePKI(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ask := func(op string, cmd *capnv1.CertificatesNodeCommand) *capnv1.CertificatesNodeReply {
		t.Helper()
		data, _ := proto.Marshal(cmd)
		m, err := nc.Request(keys.PKICommand("c1", "m1", op), data, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r := &capnv1.CertificatesNodeReply{}
		if err := proto.Unmarshal(m.Data, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := ask(PKIOpLeaves, &capnv1.CertificatesNodeCommand{}); !strings.Contains(r.GetError(), "runs no kube-local node") {
		t.Errorf("no runtime: %q", r.GetError())
	}
	rt := &fakePKI{}
	a.kube.Store(&kubeState{rt: rt})
	r := ask(PKIOpCAPhase, &capnv1.CertificatesNodeCommand{Phase: "Reissue", BundlePem: "B", IntermediatePem: "I",
		Signer: &capnv1.CertificatePair{CertPem: "C", KeyPem: "K"}, NodeClient: &capnv1.CertificatePair{CertPem: "NC", KeyPem: "NK"}})
	if r.GetError() != "" || strings.Join(r.GetIssued(), ",") != "apiserver" || strings.Join(r.GetRestarted(), ",") != "kwok" {
		t.Fatalf("ca-phase: %v", r)
	}
	rt.mu.Lock()
	p := rt.phases[0]
	rt.mu.Unlock()
	if p.Phase != "Reissue" || string(p.Bundle) != "B" || string(p.Intermediate) != "I" || string(p.Signer.CertPEM) != "C" || string(p.Signer.KeyPEM) != "K" || string(p.NodeClient.KeyPEM) != "NK" {
		t.Errorf("the runtime got %+v", p)
	}
	// Renewal at two thirds of 90h (60h), or 10h ahead of the end (80h).
	r = ask(PKIOpLeaves, &capnv1.CertificatesNodeCommand{})
	if c := r.GetCertificates(); len(c) != 1 || c[0].GetMachine() != "m1" || c[0].GetRenewAt().AsTime().Sub(c[0].GetNotAfter().AsTime()) != -30*time.Hour {
		t.Errorf("leaves: %v", c)
	}
	r = ask(PKIOpLeaves, &capnv1.CertificatesNodeCommand{RenewBefore: durationpb.New(10 * time.Hour)})
	rt.mu.Lock()
	renew := append([]time.Duration(nil), rt.renew...)
	rt.fail = errors.New("the API server did not accept")
	rt.mu.Unlock()
	if c := r.GetCertificates(); len(c) != 1 || c[0].GetRenewAt().AsTime().Sub(c[0].GetNotAfter().AsTime()) != -10*time.Hour || len(renew) != 2 || renew[1] != 10*time.Hour {
		t.Errorf("leaves with renewBefore 10h: %v (runtime got %v)", c, renew)
	}
	if r := ask(PKIOpCAPhase, &capnv1.CertificatesNodeCommand{Phase: "RemoveOld"}); r.GetError() != "the API server did not accept" {
		t.Errorf("a failing phase: %q", r.GetError())
	}
	if r := ask("nope", &capnv1.CertificatesNodeCommand{}); !strings.Contains(r.GetError(), "unknown certificates op") {
		t.Errorf("unknown op: %q", r.GetError())
	}
}
