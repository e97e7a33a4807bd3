package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"

	"github.com/capn-dev/capn/services/daemon"
)

const rotateCAHelp = `
Rotate the cluster CA of a cluster whose control plane capn runs
(bootstrap provider kube-local), without downtime, in three phases, each
done on every machine (control planes first, one at a time) before the
next begins:

  TrustBoth   every machine trusts the old and the new CA
  Reissue     every certificate is issued anew from the new CA (the API
              server's chain carries the new CA cross-signed by the old,
              so old kubeconfigs still work)
  RemoveOld   the old CA is trusted nowhere: kubeconfigs with a client
              certificate of the old CA stop working

A fresh kubeconfig (capn kubeconfig CLUSTER) works at every phase. The
command answers when the rotation is done, held (--until), or stopped on
a machine that failed; --continue resumes it. Token scopes: write, secrets.
capn describe cluster CLUSTER shows the phase (status.caRotation).

Examples:
  capn rotate-ca demo
  capn rotate-ca demo --until TrustBoth
  capn rotate-ca demo --continue
`

func cmdRotateCA(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn rotate-ca CLUSTER [--until PHASE] [--continue]", rotateCAHelp)
	var a apiFlags
	a.bind(fs)
	var until string
	var cont bool
	fs.StringVar(&until, "until", "", "stop after this `phase`: TrustBoth, Reissue (default: run to the end)")
	fs.BoolVar(&cont, "continue", false, "resume a rotation that is held or stopped")
	const name = "capn rotate-ca"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if len(pos) != 1 {
		return reportError(e.stderr, name, nil, usageError{fmt.Sprintf("want one CLUSTER, got %q", strings.Join(pos, " "))})
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	st, err := s.c.RotateCA(ctx, pos[0], until, cont)
	if err != nil {
		return s.fail(err)
	}
	fmt.Fprintf(e.stdout, "CA rotation of %s: phase %s, %s (%d of %d machines done in this phase)\n", pos[0], st.GetPhase(), st.GetState(), len(st.GetDone()), len(st.GetMachines()))
	if st.GetMessage() != "" {
		fmt.Fprintf(e.stdout, "  %s\n", st.GetMessage())
	}
	fmt.Fprintf(e.stdout, "  old CA %s\n  new CA %s\n", st.GetOldCaHash(), st.GetNewCaHash())
	return daemon.ExitOK
}

// describeCertificates is capn describe's Certificates section: the CA
// rotation's phase and the earliest leaf expiry; nothing for a cluster
// without either.
func describeCertificates(b *strings.Builder, c *capnv1.Cluster, now time.Time) {
	ca, certs := c.GetStatus().GetCaRotation(), c.GetStatus().GetCertificates()
	if ca == nil && certs == nil {
		return
	}
	b.WriteString("Certificates:\n")
	if ca != nil {
		fmt.Fprintf(b, "  CA rotation:\tphase %s, %s (%d/%d machines), started %s\n", ca.GetPhase(), ca.GetState(), len(ca.GetDone()), len(ca.GetMachines()), when(ca.GetStarted().AsTime(), now))
		if ca.GetMessage() != "" {
			fmt.Fprintf(b, "  \t%s\n", ca.GetMessage())
		}
	}
	if e := certs.GetEarliest(); e != nil {
		fmt.Fprintf(b, "  Earliest expiry:\t%s on %s, %s (renewed from %s)\n", e.GetName(), e.GetMachine(), when(e.GetNotAfter().AsTime(), now), when(e.GetRenewAt().AsTime(), now))
	}
	if cd := certs.GetCondition(); cd != nil && cd.GetStatus() != "True" {
		fmt.Fprintf(b, "  %s=%s %s:\t%s\n", cd.GetType(), cd.GetStatus(), cd.GetReason(), cd.GetMessage())
	}
}
