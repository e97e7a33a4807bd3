package bootstrapper

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"
)

// The NATS auth callout (issue 17 finding 1b, building block only: not yet
// wired into capn dev, the rendered deployment, the providers or
// capn-node). A machine logs in as user "machine.<cluster>.<machine>" with a
// password; Callout.Verify decides, and a login it accepts gets a
// short-lived user JWT that may publish only its own health and fetch
// subjects and subscribe only its own inbox prefix.

// CalloutSubject is where the server asks the callout service.
const CalloutSubject = "$SYS.REQ.USER.AUTH"

// MachineUserPrefix starts every machine's NATS user name.
const MachineUserPrefix = "machine."

// DefaultMachineJWTTTL is how long a machine's user JWT lives; the server
// disconnects it on expiry and the client reconnects with the same
// user/password, which re-authenticates it.
const DefaultMachineJWTTTL = 15 * time.Minute

// MachineInboxPrefix is the inbox prefix a machine's connection must use
// (nats.CustomInboxPrefix): the only subjects it may subscribe.
func MachineInboxPrefix(cluster, machine string) string {
	return "_INBOX_" + cluster + "_" + machine
}

// MachinePermissions are what a machine's identity may do.
func MachinePermissions(cluster, machine string) jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add("capn.health."+cluster+"."+machine+".>", "capn.bootstrap.fetch."+cluster+"."+machine)
	p.Sub.Allow.Add(MachineInboxPrefix(cluster, machine) + ".>")
	return p
}

// Callout answers the server's authorization requests.
type Callout struct {
	// Issuer signs the responses and the user JWTs: the nkey the server's
	// auth_callout names as issuer.
	Issuer nkeys.KeyPair
	// Account the minted users go into (config mode: an account name).
	Account string
	// Verify reports whether password opens machine <cluster>/<machine>;
	// it must compare in constant time.
	Verify func(ctx context.Context, cluster, machine, password string) bool
	// TTL of the minted user JWT; DefaultMachineJWTTTL when zero.
	TTL time.Duration
	Now func() time.Time
}

// parseMachineUser splits "machine.<c>.<m>".
func parseMachineUser(user string) (cluster, machine string, ok bool) {
	rest, found := strings.CutPrefix(user, MachineUserPrefix)
	if !found {
		return "", "", false
	}
	cluster, machine, found = strings.Cut(rest, ".")
	if !found || cluster == "" || machine == "" || strings.ContainsAny(machine, ".*> ") || strings.ContainsAny(cluster, "*> ") {
		return "", "", false
	}
	return cluster, machine, true
}

// Serve answers on CalloutSubject until ctx ends.
func (c *Callout) Serve(ctx context.Context, nc *nats.Conn, log zerolog.Logger) error {
	sub, err := nc.Subscribe(CalloutSubject, func(m *nats.Msg) {
		token, err := c.answer(ctx, m.Data)
		if err != nil {
			log.Warn().Err(err).Msg("auth callout")
		}
		if token != "" {
			_ = m.Respond([]byte(token))
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", CalloutSubject, err)
	}
	<-ctx.Done()
	return sub.Unsubscribe()
}

// answer returns the signed response: a user JWT, or an error the server
// turns into an authorization violation.
func (c *Callout) answer(ctx context.Context, data []byte) (string, error) {
	req, err := jwt.DecodeAuthorizationRequestClaims(string(data))
	if err != nil {
		return "", fmt.Errorf("decode authorization request: %w", err)
	}
	resp := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	resp.Audience = req.Server.ID
	user := req.ConnectOptions.Username
	cluster, machine, ok := parseMachineUser(user)
	if !ok || !c.Verify(ctx, cluster, machine, req.ConnectOptions.Password) {
		resp.Error = "not authorized"
		token, encErr := resp.Encode(c.Issuer)
		if encErr != nil {
			return "", encErr
		}
		return token, fmt.Errorf("user %q refused", user)
	}
	uc := jwt.NewUserClaims(req.UserNkey)
	uc.Name = user
	uc.Audience = c.Account
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	ttl := c.TTL
	if ttl == 0 {
		ttl = DefaultMachineJWTTTL
	}
	uc.Expires = now().Add(ttl).Unix()
	uc.Permissions = MachinePermissions(cluster, machine)
	ujwt, err := uc.Encode(c.Issuer)
	if err != nil {
		return "", fmt.Errorf("sign user jwt: %w", err)
	}
	resp.Jwt = ujwt
	return resp.Encode(c.Issuer)
}
