package bootstrapper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/schemas/keys"
)

// Each machine's own NATS identity (docs/security.md §1). The server
// delegates every login that is not one of capn's static users to this
// auth callout (nats-server's auth_callout: the static users are its
// auth_users). A machine logs in as keys.MachineUser(<c>, <m>) with one
// of two secrets from its sealed record:
//
//   - before it has joined, its bootstrap credential (what its provider
//     handed it): the user may publish its own health and fetch its own
//     bootstrap data;
//   - at any time while it is wanted, its machine secret (handed to it only
//     in the sealed fetch reply): the user may publish its own health.
//
// Either way it may subscribe only its own inbox prefix
// (keys.MachineInboxPrefix) and publishes nothing else: not another
// machine's health, not another machine's fetch, no bucket. Anything else
// — another user name, a wrong secret, a machine that is not wanted, the
// credential after the join — is refused. The minted user JWT lives
// MachineJWTTTL; the server then disconnects the client, which logs in
// again and is checked again, so a deleted machine loses its access
// within that time.
const (
	// CalloutSubject is where the server asks.
	CalloutSubject = "$SYS.REQ.USER.AUTH"
	// DefaultMachineJWTTTL bounds how long a login outlives its secret.
	DefaultMachineJWTTTL = 15 * time.Minute
	// MachineEtcdReplyWindow is how long a machine may answer an etcd
	// command (a snapshot's chunks) after it arrived.
	MachineEtcdReplyWindow = 10 * time.Minute
	// DefaultCalloutAccount is the account machines are placed in: the
	// global account, as capn dev runs. A rendered deployment names its own.
	DefaultCalloutAccount = "$G"
)

// MachinePermissions are what machine <cluster>/<machine> may do; fetch
// adds its own bootstrap fetch (before it has joined).
func MachinePermissions(cluster, machine string, fetch bool) jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(keys.Health(cluster, machine, ">"))
	if fetch {
		p.Pub.Allow.Add(keys.BootstrapFetch(cluster, machine))
	}
	p.Sub.Allow.Add(keys.MachineInboxPrefix(cluster, machine) + ".>")
	// The backup service's etcd commands to this machine, each answered
	// with as many replies as a snapshot's chunks (to the asker's reply
	// subject only, within MachineEtcdReplyWindow).
	p.Sub.Allow.Add(keys.EtcdCommand(cluster, machine, "*"))
	// Its certificates commands (a CA rotation phase carries the signing
	// CA's key): this machine's only.
	p.Sub.Allow.Add(keys.PKICommand(cluster, machine, "*"))
	p.Resp = &jwt.ResponsePermission{MaxMsgs: -1, Expires: MachineEtcdReplyWindow}
	return p
}

// errLoginRefused is a refusal; its text is logged, never sent.
var errLoginRefused = errors.New("machine login refused")

// loadCalloutIssuer reads the issuer's account seed.
func loadCalloutIssuer(file string) (nkeys.KeyPair, error) {
	seed, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("auth callout issuer: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		return nil, fmt.Errorf("auth callout issuer %s: %w", file, err)
	}
	if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicAccountKey(pub) {
		return nil, fmt.Errorf("auth callout issuer %s: not an account seed (it starts with SA)", file)
	}
	return kp, nil
}

// serveCallout answers the server's authorization requests until ctx ends.
func (s *Service) serveCallout(ctx context.Context, nc *nats.Conn, log zerolog.Logger) error {
	sub, err := nc.QueueSubscribe(CalloutSubject, FetchQueue, func(m *nats.Msg) {
		token, err := s.authorize(ctx, m.Data)
		if err != nil {
			log.Info().Err(err).Msg("NATS login refused")
		}
		if token != "" {
			if err := m.Respond([]byte(token)); err != nil {
				log.Warn().Err(err).Msg("cannot answer an authorization request")
			}
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", CalloutSubject, err)
	}
	go func() {
		<-ctx.Done()
		_ = sub.Unsubscribe()
	}()
	return nil
}

// authorize returns the signed response to one authorization request: a
// user JWT, or a refusal (with the reason as the error, for the log).
func (s *Service) authorize(ctx context.Context, data []byte) (string, error) {
	req, err := jwt.DecodeAuthorizationRequestClaims(string(data))
	if err != nil {
		return "", fmt.Errorf("decode authorization request: %w", err)
	}
	resp := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	resp.Audience = req.Server.ID
	user := req.ConnectOptions.Username
	fetch, err := s.verifyMachine(ctx, user, req.ConnectOptions.Password)
	if err != nil {
		resp.Error = "not authorized"
		token, encErr := resp.Encode(s.issuer)
		return token, errors.Join(err, encErr)
	}
	cluster, machine, _ := keys.ParseMachineUser(user)
	uc := jwt.NewUserClaims(req.UserNkey)
	uc.Name = user
	uc.Audience = s.cfg.CalloutAccount
	uc.Expires = s.cfg.Now().Add(s.cfg.MachineJWTTTL).Unix()
	uc.Permissions = MachinePermissions(cluster, machine, fetch)
	if resp.Jwt, err = uc.Encode(s.issuer); err != nil {
		return "", fmt.Errorf("sign the user JWT of %s: %w", user, err)
	}
	return resp.Encode(s.issuer)
}

// verifyMachine checks a machine login: fetch reports that the password
// was the bootstrap credential of a machine that has not joined.
func (s *Service) verifyMachine(ctx context.Context, user, password string) (fetch bool, err error) {
	cluster, machine, ok := keys.ParseMachineUser(user)
	if !ok {
		return false, fmt.Errorf("%w: user %q is not machine.<cluster>.<machine>", errLoginRefused, user)
	}
	if _, ok := s.desired.Get(keys.Machine(cluster, machine)); !ok {
		return false, fmt.Errorf("%w: machine %s/%s is not wanted", errLoginRefused, cluster, machine)
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	rec, _, err := s.boots.Get(ctx, keys.Bootstrap(cluster, machine))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, fmt.Errorf("%w: no bootstrap record for %s/%s", errLoginRefused, cluster, machine)
	case err != nil:
		return false, fmt.Errorf("%w: read the bootstrap record of %s/%s: %w", errLoginRefused, cluster, machine, err)
	case credentialMatches(rec.GetMachineSecret(), password):
		return false, nil
	case credentialMatches(rec.GetFetchCredential(), password) && !rec.GetJoined() && !s.machineJoined(cluster, machine):
		return true, nil
	}
	return false, fmt.Errorf("%w: wrong secret for %s (or its bootstrap credential after the join)", errLoginRefused, user)
}
