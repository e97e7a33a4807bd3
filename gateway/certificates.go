package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// Cluster CA rotation (issue 22): the backup service's work
// (services/backup, rotateca.go), asked over NATS (capn.backup.rotate-ca).
// Scopes write and secrets: it replaces the cluster's CA and admin
// credentials (a kubeconfig is `secrets`), and changes every machine.

// rotateCATimeout bounds a rotation's answer: each machine's phase takes
// up to about a minute (the API server's file reload).
const rotateCATimeout = 30 * time.Minute

// rotateCA is POST /v1/clusters/{name}/rotate-ca (scopes write and
// secrets), body {"until": phase, "continue": bool} (optional): the
// rotation runs, one machine at a time, until it is done, held after
// until, or a machine fails; the answer is its status. A rotation under
// way is 409 naming its phase, unless continue.
func (s *server) rotateCA(w http.ResponseWriter, r *http.Request) error {
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	var body api.RotateCARequest
	if r.ContentLength != 0 {
		if err := bodyMediaTypes.check(r); err != nil {
			return err
		}
		data, err := readBody(r)
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(data)) > 0 {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil {
				return badRequest("the body is not a CA rotation request: %v", err)
			}
		}
	}
	switch body.Until {
	case "", "TrustBoth", "Reissue", "RemoveOld", "Done":
	default:
		return badRequest("until %q is not a phase", body.Until).withField("until", "must be TrustBoth, Reissue, RemoveOld or Done (empty: Done)", body.Until)
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(rotateCATimeout + time.Minute))
	res := &capnv1.CARotationResult{}
	req := &capnv1.CARotationRequest{Cluster: name, Until: body.Until, Continue: body.Continue, RequestedBy: principalFrom(r.Context()).name}
	if err := s.askBackup(r.Context(), "rotate-ca", req, res, rotateCATimeout); err != nil {
		return err
	}
	if e := res.GetError(); e != nil {
		if e.GetCode() == "conflict" {
			return problem(http.StatusConflict, api.ProblemConflict, "CA rotation under way", "%s", e.GetMessage())
		}
		return etcdProblem(e)
	}
	return writeProtoJSON(w, http.StatusOK, res.GetStatus())
}

// certificateStatuses fills status.caRotation and status.certificates of
// kube-local clusters from the backup service's records.
func (s *server) certificateStatuses(ctx context.Context, items ...*capnv1.Cluster) error {
	if s.caStatuses == nil {
		return nil
	}
	for _, c := range items {
		if c.GetSpec().GetBootstrap().GetProvider() != "kube-local" {
			continue
		}
		name := c.GetMetadata().GetName()
		ca, _, err := s.caStatuses.Get(ctx, keys.CARotationStatus(name))
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		certs, _, err := s.certStatuses.Get(ctx, keys.CertificatesStatus(name))
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if ca == nil && certs == nil {
			continue
		}
		if c.Status == nil {
			c.Status = &capnv1.ClusterStatus{}
		}
		c.Status.CaRotation, c.Status.Certificates = ca, certs
	}
	return nil
}
