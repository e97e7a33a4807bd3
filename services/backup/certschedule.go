package backup

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// Leaf renewal on a schedule: every CertCheckEvery the service asks every
// machine of every kube-local cluster to renew its leaves that are due
// (spec.certificates.renewBefore ahead of their end, or two thirds into
// their lifetime: kube.IssueDue) and to list them all; the earliest expiry
// becomes observed backup.certs-<cluster> (status.certificates, condition
// CertificatesReady).

// DefaultCertCheckEvery is how often leaves are checked.
const DefaultCertCheckEvery = time.Hour

func (s *Service) runCertSchedule(ctx context.Context) {
	every := s.cfg.CertCheckEvery
	if every <= 0 {
		every = DefaultCertCheckEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		clusters, err := s.clusters.List(ctx, keys.Cluster(""))
		if err != nil {
			s.log.Warn().Err(err).Msg("certificate check: cannot list the clusters")
			continue
		}
		for _, e := range clusters {
			c := e.Value
			if c.GetSpec().GetBootstrap().GetProvider() != KubeLocal || c.GetMetadata().GetDeletionTimestamp() != nil {
				continue
			}
			if _, err := s.CheckCertificates(ctx, c.GetMetadata().GetName()); err != nil {
				s.log.Warn().Err(err).Str("cluster", c.GetMetadata().GetName()).Msg("certificate check")
			}
		}
	}
}

// CheckCertificates renews the cluster's leaves that are due on every
// machine and records the earliest expiry. A rotation running on the
// cluster is left alone (it issues every leaf anyway).
func (s *Service) CheckCertificates(ctx context.Context, cluster string) (*capnv1.CertificatesStatus, error) {
	cc, berr := s.caClusterOf(ctx, cluster)
	if berr != nil {
		return nil, fmt.Errorf("%s", berr.GetMessage())
	}
	if _, busy := s.caRotating.LoadOrStore(cluster, true); busy {
		return nil, fmt.Errorf("a CA rotation of %s runs: leaves are checked after it", cluster)
	}
	defer s.caRotating.Delete(cluster)
	return s.checkCertificates(ctx, cc)
}

// checkCertificates is CheckCertificates for a cluster the caller holds.
func (s *Service) checkCertificates(ctx context.Context, cc *caCluster) (*capnv1.CertificatesStatus, error) {
	cluster := cc.name
	now := s.cfg.Now()
	st := &capnv1.CertificatesStatus{Checked: timestamppb.New(now)}
	var failed, renewed []string
	for _, m := range cc.machines {
		r, err := s.pkiCommand(ctx, cluster, m, opLeaves, &capnv1.CertificatesNodeCommand{RenewBefore: cc.spec.GetRenewBefore()}, caPhaseWait)
		if err != nil {
			failed = append(failed, m+": "+err.Error())
			continue
		}
		for _, n := range r.GetIssued() {
			renewed = append(renewed, m+"/"+n)
		}
		st.Certificates = append(st.Certificates, r.GetCertificates()...)
	}
	slices.SortFunc(st.Certificates, func(a, b *capnv1.CertificateExpiry) int {
		return a.GetNotAfter().AsTime().Compare(b.GetNotAfter().AsTime())
	})
	cond := &capnv1.Condition{Type: ConditionCertificatesReady, Status: "True", Reason: "Valid", LastTransitionTime: st.Checked}
	if len(st.Certificates) > 0 {
		e := st.Certificates[0]
		st.Earliest = e
		cond.Message = fmt.Sprintf("earliest expiry: %s on %s at %s (renewed at %s)", e.GetName(), e.GetMachine(),
			e.GetNotAfter().AsTime().UTC().Format(time.RFC3339), e.GetRenewAt().AsTime().UTC().Format(time.RFC3339))
		if now.After(e.GetNotAfter().AsTime()) {
			cond.Status, cond.Reason, cond.Severity = "False", "Expired", "Error"
		}
	}
	if len(failed) > 0 {
		cond.Status, cond.Reason, cond.Severity = "False", "MachinesUnreachable", "Warning"
		cond.Message = strings.Join(failed, "; ") + ". " + cond.Message
	}
	st.Condition = cond
	if len(renewed) > 0 {
		s.log.Info().Str("cluster", cluster).Strs("renewed", renewed).Msg("leaf certificates renewed before expiry")
	}
	if _, _, err := s.certStatus.Mutate(ctx, keys.CertificatesStatus(cluster), func(_ *capnv1.CertificatesStatus, _ bool) (*capnv1.CertificatesStatus, error) {
		return st, nil
	}); err != nil {
		return st, err
	}
	return st, nil
}
