package dev

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/providers/docker"
	"github.com/capn-dev/capn/providers/process"
	"github.com/capn-dev/capn/providers/sim"
	"github.com/capn-dev/capn/services/daemon"
)

// capn dev's NATS requires authentication: each service connects as its
// own user with the permissions a rendered deployment gives it (the same
// natsconfig.Deployment.Users()), node agents as the node user, and capn
// dev itself — its provisioning connection, services it does not know and
// the nats CLI context it writes — as an admin user. Every user is an nkey
// whose seed capn dev keeps under <data-dir>/nats-users (0700, seeds 0600),
// made once and reused. Machines have no static user: each logs in as
// itself (machine.<cluster>.<machine>) through the bootstrapper's auth
// callout, whose issuer seed is kept there too.
const (
	UsersDir        = "nats-users"
	NATSContextFile = "nats-context.json"
	// devAdminUser may do anything: it provisions the topology.
	devAdminUser = devName
	// devCalloutIssuer names the auth callout issuer's account seed.
	devCalloutIssuer = "auth-callout-issuer"
)

type devAuth struct {
	dir   string
	known map[string]bool // users with a deployment's permissions
	nkeys []*server.NkeyUser
	// callout delegates every other login to the bootstrapper.
	callout *server.AuthCallout
}

// devNATSDeployment is capn dev's deployment as natsconfig sees it: the
// providers cfg names and node agents.
func devNATSDeployment(cfg Config) natsconfig.Deployment {
	d := natsconfig.Deployment{NodeAgents: true}
	for _, p := range cfg.providerList() {
		np := natsconfig.Provider{Name: p}
		switch p {
		case sim.Name:
			np.Heartbeats = true // its simulated nodes
		case process.Name, docker.Name:
			np.ObservedReads = []string{"secrets.>"} // the CA pin they hand their nodes
		}
		d.Providers = append(d.Providers, np)
	}
	return d
}

// newDevAuth loads or makes the seeds of d's users and the admin.
func newDevAuth(dataDir string, d natsconfig.Deployment) (*devAuth, error) {
	a := &devAuth{dir: filepath.Join(dataDir, UsersDir), known: map[string]bool{}}
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return nil, fmt.Errorf("NATS users: %w", err)
	}
	if err := os.Chmod(a.dir, 0o700); err != nil {
		return nil, fmt.Errorf("NATS users: %w", err)
	}
	for _, u := range append(d.Users(), natsconfig.User{Name: devAdminUser}) {
		pub, _, err := natsconfig.EnsureSeed(a.seedPath(u.Name))
		if err != nil {
			return nil, err
		}
		nu := &server.NkeyUser{Nkey: pub}
		if u.Name != devAdminUser {
			nu.Permissions = serverPermissions(u.Perms)
			a.known[u.Name] = true
		}
		a.nkeys = append(a.nkeys, nu)
	}
	issuer, _, err := natsconfig.EnsureIssuerSeed(a.issuerSeedPath())
	if err != nil {
		return nil, err
	}
	a.callout = &server.AuthCallout{Issuer: issuer}
	for _, nu := range a.nkeys {
		a.callout.AuthUsers = append(a.callout.AuthUsers, nu.Nkey)
	}
	return a, nil
}

// issuerSeedPath is the auth callout issuer's seed, for the bootstrapper.
func (a *devAuth) issuerSeedPath() string { return filepath.Join(a.dir, devCalloutIssuer+".nk") }

func (a *devAuth) seedPath(user string) string { return filepath.Join(a.dir, user+".nk") }

// conn is how the service called name connects: as its own user when the
// deployment has one, else as the admin.
func (a *devAuth) conn(name string) daemon.NATSConfig {
	if !a.known[name] {
		return daemon.NATSConfig{NKeySeedFile: a.seedPath(devAdminUser)}
	}
	return daemon.NATSConfig{NKeySeedFile: a.seedPath(name), InboxPrefix: natsconfig.InboxPrefix(name)}
}

// writeContext writes the nats CLI's context for the admin user (0600):
// nats --context <abs path> kv ls.
func (a *devAuth) writeContext(dataDir, url string) (string, error) {
	path := filepath.Join(dataDir, NATSContextFile)
	b, err := json.MarshalIndent(map[string]string{
		"description": "capn dev (admin user; made by capn dev)",
		"url":         url,
		"nkey":        a.seedPath(devAdminUser),
	}, "", "  ")
	if err != nil {
		return "", err
	}
	return path, os.WriteFile(path, append(b, '\n'), 0o600)
}

// serverPermissions is p as nats-server takes it; the renderer writes the
// same (natsconfig.ServerConfig).
func serverPermissions(p natsconfig.Permissions) *server.Permissions {
	pub := &server.SubjectPermission{Allow: p.PublishAllow, Deny: p.PublishDeny}
	if len(pub.Allow) == 0 {
		pub.Deny = append([]string{">"}, pub.Deny...)
	}
	perms := &server.Permissions{Publish: pub, Subscribe: &server.SubjectPermission{Allow: p.SubscribeAllow}}
	if p.Responses {
		perms.Response = &server.ResponsePermission{MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS, Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION}
	}
	return perms
}
