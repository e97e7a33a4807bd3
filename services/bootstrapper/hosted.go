package bootstrapper

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/replyseal"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/pki"
)

// The hosted control-plane PKI (docs/security.md, "Hosted control
// planes"): the controlplane-hosted service runs a hosted cluster's etcd
// and Kubernetes components, which need what a control-plane machine's
// bootstrap data holds — the cluster, etcd and front-proxy CAs with their
// keys and the service-account key pair. It asks for them on
// capn.bootstrap.hosted.<cluster> with a fresh X25519 key
// (replyseal.HeaderKey); the bootstrapper answers a ClusterPKI sealed to
// that key, and only for a cluster whose desired control plane is of type
// hosted and that is not being deleted. Only the controlplane-hosted NATS
// user may publish the request (deploy/natsconfig), so no other service
// gets a cluster's CA keys, and the hosted service never gets those of a
// cluster whose control plane runs on machines or elsewhere.
const HostedSubjectRoot = keys.BootstrapHostedRoot

// serveHosted answers hosted PKI requests until ctx ends.
func (s *Service) serveHosted(ctx context.Context, nc *nats.Conn, log zerolog.Logger) error {
	sub, err := nc.QueueSubscribe(HostedSubjectRoot+".*", FetchQueue, func(m *nats.Msg) {
		data, key, code, err := s.hostedPKI(ctx, m.Subject, m.Header.Get(replyseal.HeaderKey))
		reply := nats.NewMsg(m.Reply)
		if err != nil {
			log.Info().Err(err).Int("code", code).Str("subject", m.Subject).Msg("hosted PKI request refused")
			reply.Header.Set(HeaderError, err.Error())
			reply.Header.Set(HeaderErrorCode, strconv.Itoa(code))
		} else {
			reply.Data = data
			reply.Header.Set(replyseal.HeaderKey, key)
			log.Info().Str("subject", m.Subject).Msg("hosted control-plane PKI handed out")
		}
		if m.Reply == "" {
			return
		}
		if err := m.RespondMsg(reply); err != nil {
			log.Warn().Err(err).Str("subject", m.Subject).Msg("cannot answer a hosted PKI request")
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", HostedSubjectRoot, err)
	}
	go func() {
		<-ctx.Done()
		_ = sub.Unsubscribe()
	}()
	return nil
}

// hostedPKI is the sealed ClusterPKI and the reply's key, or a refusal:
// 400 malformed (subject, key), 404 no such cluster, 403 not a hosted
// control plane, 409 being deleted, 500 the PKI cannot be made or read
// now (retry).
func (s *Service) hostedPKI(ctx context.Context, subject, public string) ([]byte, string, int, error) {
	cluster, ok := strings.CutPrefix(subject, HostedSubjectRoot+".")
	if !ok || cluster == "" || strings.Contains(cluster, ".") {
		return nil, "", 400, fmt.Errorf("subject %q is not %s.<cluster>", subject, HostedSubjectRoot)
	}
	if public == "" {
		return nil, "", 400, fmt.Errorf("header %s is required: the public half of a fresh X25519 key to seal the answer to", replyseal.HeaderKey)
	}
	c, found, err := s.clusterNow(ctx, cluster)
	switch {
	case err != nil:
		return nil, "", 500, err
	case !found:
		return nil, "", 404, fmt.Errorf("no desired cluster %s", cluster)
	case c.GetSpec().GetControlPlane().Implementation() != capnv1.ControlPlaneHosted:
		return nil, "", 403, fmt.Errorf("cluster %s's control plane is of type %s, not %s: its CA keys are not handed out", cluster, c.GetSpec().GetControlPlane().Implementation(), capnv1.ControlPlaneHosted)
	case c.GetMetadata().GetDeletionTimestamp() != nil:
		return nil, "", 409, fmt.Errorf("cluster %s is being deleted", cluster)
	}
	set, err := s.ensurePKI(ctx, c)
	if err != nil {
		return nil, "", 500, fmt.Errorf("PKI of %s: %w", cluster, err)
	}
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(pki.ToProto(set.set))
	if err != nil {
		return nil, "", 500, err
	}
	sealed, key, err := replyseal.SealTo(public, subject, out)
	if err != nil {
		return nil, "", 400, err
	}
	return sealed, key, 0, nil
}
