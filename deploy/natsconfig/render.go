package natsconfig

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
)

// Files of a user's directory (users/<name>/ of a render): what its
// component mounts (at Deployment.UserDir in a container).
const (
	UserSeedFile = "nats.nk"  // the nkey seed (secret)
	UserPubFile  = "nats.pub" // the public nkey
	UserCertFile = "nats.pem" // client certificate
	UserKeyFile  = "nats-key.pem"
	UserCAFile   = "nats-ca.pem" // verifies the servers
	UserEnvFile  = "env"         // CAPN_NATS_* settings
	// CalloutIssuerSeedFile (in the bootstrapper's directory, with
	// NodeAgents) is the account nkey seed (secret) the bootstrapper signs
	// machines' logins with; CalloutIssuerPubFile its public key, the
	// nodes' auth_callout issuer.
	CalloutIssuerSeedFile = "auth-callout-issuer.nk"
	// AutoscalerCertFile, AutoscalerKeyFile and AutoscalerCAFile (in the
	// autoscaler-provider's directory) are its gRPC server certificate and
	// key and the CA of the autoscalers' client certificates; the render's
	// AutoscalerDir holds that CA and each cluster's client files
	// (secrets/autoscalertls).
	AutoscalerCertFile   = "autoscaler-server.crt"
	AutoscalerKeyFile    = "autoscaler-server.key"
	AutoscalerCAFile     = "autoscaler-ca.crt"
	AutoscalerDir        = "autoscaler"
	CalloutIssuerPubFile = "auth-callout-issuer.pub"
	certsDir             = "certs"
	machinesDir          = "machines"
	caKeyFile            = "ca-key.pem"
	routeCAKeyFile       = "route-ca-key.pem"
)

// Layout names the files of a render in Dir.
type Layout struct{ Dir string }

// ServerDir is node name's directory: its config and TLS files.
func (l Layout) ServerDir(name string) string { return filepath.Join(l.Dir, "nats", name) }

// ServerConfig is node name's nats-server configuration file.
func (l Layout) ServerConfig(name string) string {
	return filepath.Join(l.ServerDir(name), ServerConfigFile)
}

// UserDir is user's credentials directory.
func (l Layout) UserDir(user string) string { return filepath.Join(l.Dir, "users", user) }

// UserFile is file of user's directory (UserSeedFile, UserCertFile...).
func (l Layout) UserFile(user, file string) string { return filepath.Join(l.UserDir(user), file) }

// MachinesDir is the machines' transport directory (with NodeAgents): what
// every machine's node agents need to reach the servers — the URL, and
// with TLS a client certificate shared by all machines and the CA — but no
// NATS credential: each machine logs in as itself with its own secret
// through the bootstrapper's auth callout. Its files have the names of a
// user directory's (UserCertFile, UserKeyFile, UserCAFile, UserEnvFile).
func (l Layout) MachinesDir() string { return filepath.Join(l.Dir, machinesDir) }

// MachinesFile is file of the machines' directory.
func (l Layout) MachinesFile(file string) string { return filepath.Join(l.MachinesDir(), file) }

// Rendered is what Render did.
type Rendered struct {
	Layout
	// PublicKeys are every user's public nkey.
	PublicKeys map[string]string
	// CalloutIssuer is the auth callout issuer's public account key (with
	// NodeAgents; empty without).
	CalloutIssuer string
	// Created lists the keys and certificates made by this render (not
	// reused from an earlier one), relative to Dir.
	Created []string
}

// Render writes d into dir (created if needed):
//
//	certs/ca.pem, ca-key.pem             the client CA (when d.TLS)
//	certs/route-ca.pem, route-ca-key.pem the route CA
//	nats/<server>/nats.conf              each node's configuration, and its
//	  server.pem, server-key.pem, route.pem, route-key.pem, ca.pem, route-ca.pem
//	users/<user>/nats.nk, nats.pub       each user's nkey seed (0600) and public key
//	  nats.pem, nats-key.pem, nats-ca.pem   its client certificate and the CA
//	  env                                CAPN_NATS_* settings for the runtime
//	users/bootstrapper/auth-callout-issuer.nk, .pub
//	                                     with NodeAgents: the auth callout
//	                                     issuer's account seed (0600) and key
//	machines/nats.pem, nats-key.pem, nats-ca.pem, env
//	                                     with NodeAgents: the machines'
//	                                     transport (no credential)
//
// Keys, seeds and certificates already there are kept (a certificate is
// issued again when it expires within 30 days or no longer fits), so a
// re-render changes nothing but what d changed; everything else is a pure
// function of d and the public keys.
func Render(d Deployment, dir string) (*Rendered, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("natsconfig: invalid deployment: %w", err)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	r := &Rendered{Layout: Layout{Dir: dir}, PublicKeys: map[string]string{}}
	rel := func(p string) string {
		if q, err := filepath.Rel(dir, p); err == nil {
			return q
		}
		return p
	}
	now := time.Now()
	users := d.Users()

	for _, u := range users {
		if err := os.MkdirAll(r.UserDir(u.Name), 0o700); err != nil {
			return nil, err
		}
		pub, created, err := EnsureSeed(r.UserFile(u.Name, UserSeedFile))
		if err != nil {
			return nil, fmt.Errorf("user %s: %w", u.Name, err)
		}
		if created {
			r.Created = append(r.Created, rel(r.UserFile(u.Name, UserSeedFile)))
		}
		r.PublicKeys[u.Name] = pub
		if err := writeFile(r.UserFile(u.Name, UserPubFile), []byte(pub+"\n"), 0o644); err != nil {
			return nil, err
		}
	}

	if d.NodeAgents {
		seed := r.UserFile(Bootstrapper, CalloutIssuerSeedFile)
		pub, created, err := EnsureIssuerSeed(seed)
		if err != nil {
			return nil, fmt.Errorf("auth callout issuer: %w", err)
		}
		if created {
			r.Created = append(r.Created, rel(seed))
		}
		r.CalloutIssuer = pub
		if err := writeFile(r.UserFile(Bootstrapper, CalloutIssuerPubFile), []byte(pub+"\n"), 0o644); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(r.MachinesDir(), 0o700); err != nil {
			return nil, err
		}
	}

	var clientCA, routeCA *authority
	if d.TLS {
		if err := os.MkdirAll(filepath.Join(dir, certsDir), 0o700); err != nil {
			return nil, err
		}
		var created bool
		caPath := filepath.Join(dir, certsDir, CAFile)
		if clientCA, created, err = loadOrCreateCA(caPath, filepath.Join(dir, certsDir, caKeyFile), "capn client CA", now); err != nil {
			return nil, err
		} else if created {
			r.Created = append(r.Created, rel(caPath))
		}
		routeCAPath := filepath.Join(dir, certsDir, RouteCAFile)
		if routeCA, created, err = loadOrCreateCA(routeCAPath, filepath.Join(dir, certsDir, routeCAKeyFile), "capn route CA", now); err != nil {
			return nil, err
		} else if created {
			r.Created = append(r.Created, rel(routeCAPath))
		}
		for _, u := range users {
			cert := r.UserFile(u.Name, UserCertFile)
			issued, err := clientCA.ensure(cert, r.UserFile(u.Name, UserKeyFile),
				leaf{cn: u.Name, usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, now)
			if err != nil {
				return nil, fmt.Errorf("user %s: %w", u.Name, err)
			}
			if issued {
				r.Created = append(r.Created, rel(cert))
			}
			if err := writeFile(r.UserFile(u.Name, UserCAFile), clientCA.certPEM, 0o644); err != nil {
				return nil, err
			}
		}
		if d.NodeAgents {
			// One transport certificate for every machine: it opens the
			// TLS connection, not a login.
			cert := r.MachinesFile(UserCertFile)
			issued, err := clientCA.ensure(cert, r.MachinesFile(UserKeyFile),
				leaf{cn: machinesDir, usage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, now)
			if err != nil {
				return nil, fmt.Errorf("machines: %w", err)
			}
			if issued {
				r.Created = append(r.Created, rel(cert))
			}
			if err := writeFile(r.MachinesFile(UserCAFile), clientCA.certPEM, 0o644); err != nil {
				return nil, err
			}
		}
	}

	for _, s := range d.Servers {
		sdir := r.ServerDir(s.Name)
		if err := os.MkdirAll(sdir, 0o700); err != nil {
			return nil, err
		}
		if d.TLS {
			names, ips := serverNames(s)
			for _, c := range []struct {
				ca        *authority
				cert, key string
				usage     []x509.ExtKeyUsage
				caFile    string
			}{
				{clientCA, ServerCertFile, ServerKeyFile, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, CAFile},
				// A route is both: it dials and it accepts.
				{routeCA, RouteCertFile, RouteKeyFile, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, RouteCAFile},
			} {
				cert := filepath.Join(sdir, c.cert)
				issued, err := c.ca.ensure(cert, filepath.Join(sdir, c.key), leaf{cn: s.Name, dns: names, ips: ips, usage: c.usage}, now)
				if err != nil {
					return nil, fmt.Errorf("server %s: %w", s.Name, err)
				}
				if issued {
					r.Created = append(r.Created, rel(cert))
				}
				if err := writeFile(filepath.Join(sdir, c.caFile), c.ca.certPEM, 0o644); err != nil {
					return nil, err
				}
			}
		}
		cdir := s.ConfigDir
		if cdir == "" {
			cdir = sdir
		}
		conf, err := d.ServerConfig(s.Name, cdir, r.PublicKeys, r.CalloutIssuer)
		if err != nil {
			return nil, err
		}
		if err := writeFile(r.ServerConfig(s.Name), []byte(conf), 0o644); err != nil {
			return nil, err
		}
	}

	for _, u := range users {
		if err := writeFile(r.UserFile(u.Name, UserEnvFile), []byte(d.Env(u.Name, r.Layout)), 0o644); err != nil {
			return nil, err
		}
	}
	if d.NodeAgents {
		if err := writeFile(r.MachinesFile(UserEnvFile), []byte(d.MachinesEnv(r.Layout)), 0o644); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Env is the environment file of user: the runtime's CAPN_NATS_*
// settings, with paths in d.UserDir (or l's user directory when empty).
// Every component but the init job runs with --skip-provision.
func (d Deployment) Env(user string, l Layout) string {
	udir := d.UserDir
	if udir == "" {
		udir = l.UserDir(user)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# NATS settings of %s, rendered by capn-nats-config: re-render, do not edit.\n", user)
	set := func(k, v string) { fmt.Fprintf(&b, "%s=%s\n", k, v) }
	set("CAPN_NATS_URL", d.ClientURLs())
	set("CAPN_NATS_NKEY", filepath.ToSlash(filepath.Join(udir, UserSeedFile)))
	if d.TLS {
		set("CAPN_NATS_TLS_CERT", filepath.ToSlash(filepath.Join(udir, UserCertFile)))
		set("CAPN_NATS_TLS_KEY", filepath.ToSlash(filepath.Join(udir, UserKeyFile)))
		set("CAPN_NATS_TLS_CA", filepath.ToSlash(filepath.Join(udir, UserCAFile)))
	}
	set("CAPN_NATS_INBOX_PREFIX", InboxPrefix(user))
	set("CAPN_STREAM_REPLICAS", strconv.Itoa(d.Replicas))
	if user != Init {
		set("CAPN_SKIP_PROVISION", "true")
	}
	if user == Bootstrapper && d.NodeAgents {
		// It answers the servers' auth callout: machines log in as themselves.
		set("CAPN_AUTH_CALLOUT_ISSUER_SEED_FILE", filepath.ToSlash(filepath.Join(udir, CalloutIssuerSeedFile)))
		set("CAPN_AUTH_CALLOUT_ACCOUNT", d.Account)
	}
	if user == AutoscalerProvider {
		set("CAPN_AUTOSCALER_TLS_CERT", filepath.ToSlash(filepath.Join(udir, AutoscalerCertFile)))
		set("CAPN_AUTOSCALER_TLS_KEY", filepath.ToSlash(filepath.Join(udir, AutoscalerKeyFile)))
		set("CAPN_AUTOSCALER_TLS_CLIENT_CA", filepath.ToSlash(filepath.Join(udir, AutoscalerCAFile)))
	}
	return b.String()
}

// MachinesEnv is the environment file of the machines' node agents
// (capn-node, capn-npd-bridge): the URL and, with TLS, the transport
// files, with paths in d.UserDir (or l's machines directory when empty).
// It names no credential and no inbox prefix: capn-node logs in as its
// machine (user machine.<cluster>.<machine>, its machine secret or
// bootstrap credential as the password, inbox _INBOX_machine.<c>.<m>).
func (d Deployment) MachinesEnv(l Layout) string {
	dir := d.UserDir
	if dir == "" {
		dir = l.MachinesDir()
	}
	var b strings.Builder
	b.WriteString("# NATS transport of machines (no credential: each logs in as itself), rendered by capn-nats-config: re-render, do not edit.\n")
	set := func(k, v string) { fmt.Fprintf(&b, "%s=%s\n", k, v) }
	set("CAPN_NATS_URL", d.ClientURLs())
	if d.TLS {
		set("CAPN_NATS_TLS_CERT", filepath.ToSlash(filepath.Join(dir, UserCertFile)))
		set("CAPN_NATS_TLS_KEY", filepath.ToSlash(filepath.Join(dir, UserKeyFile)))
		set("CAPN_NATS_TLS_CA", filepath.ToSlash(filepath.Join(dir, UserCAFile)))
	}
	return b.String()
}

// serverNames are the names a node's certificates hold: its host, its
// name, localhost, and the loopback addresses (for tests on one host).
func serverNames(s Server) ([]string, []net.IP) {
	dns := []string{s.Name}
	var ips []net.IP
	if ip := net.ParseIP(s.Host); ip != nil {
		ips = append(ips, ip)
	} else if s.Host != s.Name {
		dns = append(dns, s.Host)
	}
	dns = append(dns, "localhost")
	for _, lo := range []string{"127.0.0.1", "::1"} {
		ip := net.ParseIP(lo)
		if len(ips) == 0 || !ips[0].Equal(ip) {
			ips = append(ips, ip)
		}
	}
	return dns, ips
}

// EnsureSeed reads the user nkey seed in path, or creates one (0600). It
// returns the public key and whether it created the seed.
func EnsureSeed(path string) (string, bool, error) {
	return ensureSeed(path, "user", nkeys.CreateUser, nkeys.IsValidPublicUserKey)
}

// EnsureIssuerSeed reads the account nkey seed in path, or creates one
// (0600): the issuer of the auth callout's answers (auth_callout's
// issuer), which the bootstrapper signs machines' logins with.
func EnsureIssuerSeed(path string) (string, bool, error) {
	return ensureSeed(path, "account", nkeys.CreateAccount, nkeys.IsValidPublicAccountKey)
}

func ensureSeed(path, kind string, create func() (nkeys.KeyPair, error), valid func(string) bool) (string, bool, error) {
	if b, err := os.ReadFile(path); err == nil {
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
		if err != nil {
			return "", false, fmt.Errorf("%s: not an nkey seed: %w", path, err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return "", false, err
		}
		if !valid(pub) {
			return "", false, fmt.Errorf("%s: not %s %s seed", path, map[bool]string{true: "an", false: "a"}[kind == "account"], kind)
		}
		return pub, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", false, err
	}
	kp, err := create()
	if err != nil {
		return "", false, fmt.Errorf("create nkey: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return "", false, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", false, err
	}
	if err := writeFile(path, append(seed, '\n'), 0o600); err != nil {
		return "", false, err
	}
	return pub, true, nil
}

// writeFile writes b to path with mode through a temporary file and a
// rename, and leaves a file that already holds b untouched.
func writeFile(path string, b []byte, mode os.FileMode) error {
	if sameFile(path, b) {
		return os.Chmod(path, mode)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
