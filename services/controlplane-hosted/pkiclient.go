package controlplanehosted

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/capn-dev/capn/events/replyseal"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/pki"
	"google.golang.org/protobuf/proto"
)

// The bootstrapper's refusal headers (bootstrapper.HeaderError,
// HeaderErrorCode: the NATS micro services convention).
const (
	headerError     = "Nats-Service-Error"
	headerErrorCode = "Nats-Service-Error-Code"
)

// RequestPKI asks the bootstrapper for a hosted cluster's control-plane
// PKI (the cluster, etcd and front-proxy CAs with their keys, and the
// service-account key pair) on capn.bootstrap.hosted.<cluster>, with a
// fresh X25519 key the answer is sealed to (docs/security.md, "Hosted
// control planes"). The bootstrapper answers only for a cluster of type
// hosted; only this service's NATS user may ask.
func RequestPKI(ctx context.Context, nc *nats.Conn, cluster string) (pki.Set, error) {
	key, err := replyseal.NewKey()
	if err != nil {
		return pki.Set{}, err
	}
	subject := keys.BootstrapHosted(cluster)
	req := nats.NewMsg(subject)
	req.Header.Set(replyseal.HeaderKey, key.Public())
	r, err := nc.RequestMsgWithContext(ctx, req)
	if err != nil {
		return pki.Set{}, fmt.Errorf("ask the bootstrapper for %s's PKI: %w", cluster, err)
	}
	if code := r.Header.Get(headerErrorCode); code != "" {
		return pki.Set{}, fmt.Errorf("the bootstrapper refused %s's PKI (%s): %s", cluster, code, r.Header.Get(headerError))
	}
	plain, err := key.Open(r.Header.Get(replyseal.HeaderKey), subject, r.Data)
	if err != nil {
		return pki.Set{}, fmt.Errorf("%s's PKI: %w", cluster, err)
	}
	var p capnv1.ClusterPKI
	if err := proto.Unmarshal(plain, &p); err != nil {
		return pki.Set{}, fmt.Errorf("%s's PKI: %w", cluster, err)
	}
	set := pki.FromProto(&p)
	if set.CA.IsZero() || set.EtcdCA.IsZero() || set.FrontProxyCA.IsZero() || set.ServiceAccount.IsZero() {
		return pki.Set{}, fmt.Errorf("%s's PKI is incomplete", cluster)
	}
	return set, nil
}
