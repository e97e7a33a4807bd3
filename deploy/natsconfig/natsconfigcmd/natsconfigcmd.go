// Package natsconfigcmd is the capn-nats-config command (and `capn
// nats-config`, which runs the same Run): it renders capn's NATS
// deployment and provisions its JetStream topology:
//
//	capn-nats-config render [--out deploy/local] [--provider sim:heartbeats ...]
//	capn-nats-config provision [runtime NATS flags] [--nats-inbox-prefix P] [--timeout 5m]
//	capn-nats-config users [--provider ...]
//
// render writes the configuration of the three nats-server nodes of
// docker-compose.yaml, one nkey user per component with its least
// permissions, TLS certificates from local CAs, each component's
// environment file, the auth callout's issuer seed (the bootstrapper logs
// each machine in as itself), the machines' transport directory, the
// secrets key of the bootstrapper and the gateway, and a gateway admin
// token (deploy/natsconfig describes the layout). It
// keeps every key, seed, certificate and token already there, so running it
// again changes only what the deployment's description changed.
//
// provision is the compose init job: as the capn-init user it creates or
// updates every stream and bucket (R3) and waits until each has a leader
// and current replicas, then exits.
//
// users prints every user's permissions.
package natsconfigcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/secrets/autoscalertls"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
)

// Files render writes beyond natsconfig's.
const (
	// SecretsKeyFile (in the bootstrapper's, the gateway's, the
	// health-watcher's and the addon-manager's user directories) seals the
	// secrets bucket.
	SecretsKeyFile = "secrets.key"
	// TokensFile (in the gateway's user directory) holds the hash of the
	// admin token; AdminTokenFile (at the top) the token itself.
	TokensFile     = "tokens"
	AdminTokenFile = "gateway-admin.token"
	// ComposeEnvFile holds docker-compose's variables for this render.
	ComposeEnvFile = "compose.env"
)

const usage = `usage: capn-nats-config <command> [flags]  (or: capn nats-config <command>)

commands:
  render     write node configs, users, certificates and env files (default --out deploy/local)
  provision  create capn's streams and buckets as the init user and wait until they are ready
  users      print every user's permissions
  autoscaler-client  write a cluster's cluster-autoscaler client certificate and --cloud-config
`

// Run runs the command with args (the command name first: render,
// provision or users) and returns the exit code (daemon.ExitOK,
// ExitUsage, ExitFailed).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return daemon.ExitUsage
	}
	var err error
	switch args[0] {
	case "render":
		err = render(args[1:], stdout, stderr)
	case "provision":
		err = provision(ctx, args[1:], stdout, stderr)
	case "users":
		err = users(args[1:], stdout, stderr)
	case "autoscaler-client":
		err = autoscalerClient(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return daemon.ExitOK
	default:
		fmt.Fprintf(stderr, "capn-nats-config: unknown command %q\n%s", args[0], usage)
		return daemon.ExitUsage
	}
	var ue usageError
	switch {
	case err == nil:
		return daemon.ExitOK
	case errors.Is(err, flag.ErrHelp):
		return daemon.ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "capn-nats-config %s: %v\nSee 'capn-nats-config %s -h' for help.\n", args[0], err, args[0])
		return daemon.ExitUsage
	default:
		fmt.Fprintf(stderr, "capn-nats-config %s: %v\n", args[0], err)
		return daemon.ExitFailed
	}
}

type usageError struct{ error }

// parse parses args: -h prints the help on stdout; a bad flag is a usage
// error naming the flag (daemon.ParseFlags).
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if err := daemon.ParseFlags(fs, args, stdout); err != nil && !errors.Is(err, flag.ErrHelp) {
		return usageError{err}
	} else if err != nil {
		return err
	}
	return nil
}

// providersFlag collects --provider name[:trait,...] (traits: heartbeats,
// secrets-status).
type providersFlag struct {
	set bool
	ps  []natsconfig.Provider
}

func (f *providersFlag) String() string {
	var s []string
	for _, p := range f.ps {
		s = append(s, p.Name)
	}
	return strings.Join(s, ",")
}

func (f *providersFlag) Set(v string) error {
	if !f.set {
		f.set, f.ps = true, nil
	}
	name, traits, _ := strings.Cut(v, ":")
	p := natsconfig.Provider{Name: name}
	for _, t := range strings.Split(traits, ",") {
		switch t {
		case "":
		case "heartbeats":
			p.Heartbeats = true
		case "secrets-status":
			p.ObservedReads = append(p.ObservedReads, "secrets.>")
		default:
			return fmt.Errorf("provider %s: unknown trait %q (heartbeats, secrets-status)", name, t)
		}
	}
	f.ps = append(f.ps, p)
	return nil
}

// deploymentFlags binds the description's flags to fs.
func deploymentFlags(fs *flag.FlagSet) func() natsconfig.Deployment {
	d := natsconfig.Compose()
	pf := &providersFlag{ps: d.Providers}
	fs.Var(pf, "provider", "a provider that gets a user, `name[:trait,...]` (traits: heartbeats = publishes node heartbeats, secrets-status = reads observed secrets.<cluster>); repeat; default sim:heartbeats and docker:secrets-status")
	fs.IntVar(&d.Replicas, "replicas", d.Replicas, "`replicas` of streams and buckets")
	return func() natsconfig.Deployment {
		d.Providers = pf.ps
		return d
	}
}

func render(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "deploy/local", "`directory` to render into")
	deployment := deploymentFlags(fs)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	d := deployment()
	r, err := natsconfig.Render(d, *out)
	if err != nil {
		return err
	}
	created := r.Created
	more, err := renderSecrets(r.Layout)
	if err != nil {
		return err
	}
	created = append(created, more...)
	if made, err := renderAutoscaler(r.Layout); err != nil {
		return err
	} else if made {
		created = append(created, natsconfig.AutoscalerDir)
	}
	if err := writeFile(filepath.Join(r.Dir, ComposeEnvFile), []byte(composeEnv(r.Dir)), 0o644); err != nil {
		return err
	}
	machines := ""
	if d.NodeAgents {
		machines = ", the auth callout and the machines' transport"
	}
	fmt.Fprintf(stdout, "rendered %d nodes, %d users%s into %s\n", len(d.Servers), len(d.Users()), machines, r.Dir)
	for _, c := range created {
		fmt.Fprintf(stdout, "  created %s\n", c)
	}
	return nil
}

// renderSecrets makes the secrets key (shared by the bootstrapper, the
// gateway, the health-watcher, the addon-manager, the backup service and
// controlplane-external) and the gateway's
// admin token, unless
// they exist.
func renderSecrets(l natsconfig.Layout) ([]string, error) {
	var created []string
	bkey := l.UserFile(natsconfig.Bootstrapper, SecretsKeyFile)
	if _, made, err := seal.GenerateKeyFile(bkey); err != nil {
		return nil, err
	} else if made {
		created = append(created, rel(l.Dir, bkey))
	}
	key, err := os.ReadFile(bkey)
	if err != nil {
		return nil, err
	}
	// The backup service seals workload clusters' etcd snapshots with it.
	// controlplane-external opens registered external kubeconfigs.
	for _, user := range []string{natsconfig.Gateway, natsconfig.HealthWatcher, natsconfig.AddonManager, natsconfig.Backup, natsconfig.ControlPlaneExternal} {
		if err := writeFile(l.UserFile(user, SecretsKeyFile), key, 0o600); err != nil {
			return nil, err
		}
	}
	tokenPath := filepath.Join(l.Dir, AdminTokenFile)
	token, err := os.ReadFile(tokenPath)
	if errors.Is(err, os.ErrNotExist) {
		t, err := gateway.GenerateToken()
		if err != nil {
			return nil, err
		}
		token = []byte(t + "\n")
		if err := writeFile(tokenPath, token, 0o600); err != nil {
			return nil, err
		}
		created = append(created, AdminTokenFile)
	} else if err != nil {
		return nil, err
	}
	tokens := fmt.Sprintf("# The admin token of %s, hashed: rendered by capn-nats-config.\n%s admin admin\n",
		AdminTokenFile, gateway.HashToken(strings.TrimSpace(string(token))))
	return created, writeFile(l.UserFile(natsconfig.Gateway, TokensFile), []byte(tokens), 0o600)
}

// composeEnv is docker-compose's variables for a render in dir: its files
// and the user the containers run as (the owner of the files, so that the
// 0600 seeds and keys are readable).
func composeEnv(dir string) string {
	return fmt.Sprintf(`# docker-compose variables, rendered by capn-nats-config:
#   docker-compose --env-file %s up -d
CAPN_DEPLOY_DIR=%s
CAPN_UID=%d
CAPN_GID=%d
`, filepath.Join(dir, ComposeEnvFile), dir, os.Getuid(), os.Getgid())
}

func rel(dir, p string) string {
	if r, err := filepath.Rel(dir, p); err == nil {
		return r
	}
	return p
}

func writeFile(path string, b []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && string(old) == string(b) {
		return os.Chmod(path, mode)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func provision(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("provision", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg daemon.Config
	cfg.Name = natsconfig.Init
	cfg.RegisterFlags(fs)
	timeout := 5 * time.Minute
	own := []daemon.Flag{
		{Name: "timeout", Env: "CAPN_PROVISION_TIMEOUT", Usage: "how long to wait for the cluster before failing", Value: daemon.DurationValue(&timeout)},
	}
	daemon.BindFlags(fs, own...)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if err := errors.Join(cfg.ApplyEnv(os.LookupEnv), daemon.ApplyFlagEnv(fs, os.LookupEnv, own...)); err != nil {
		return usageError{err}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	log := daemon.NewLogger(cfg, stderr).With().Str("service", cfg.Name).Logger()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, err := daemon.Connect(ctx, cfg.NATS, cfg.Name, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	start := time.Now()
	log.Info().Int("replicas", cfg.Replicas).Strs("streams", natsconfig.StreamNames()).Msg("provisioning streams and buckets")
	if err := natsconfig.Provision(ctx, js, cfg.Replicas); err != nil {
		return err
	}
	log.Info().Dur("took", time.Since(start)).Msg("streams and buckets ready")
	return nil
}

func users(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("users", flag.ContinueOnError)
	fs.SetOutput(stderr)
	deployment := deploymentFlags(fs)
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	d := deployment()
	for _, u := range d.Users() {
		fmt.Fprintf(stdout, "%s — %s (inbox %s)\n", u.Name, u.Role, u.Inbox)
		for _, s := range u.Perms.PublishAllow {
			fmt.Fprintf(stdout, "  pub   %s\n", s)
		}
		for _, s := range u.Perms.PublishDeny {
			fmt.Fprintf(stdout, "  deny  %s\n", s)
		}
		for _, s := range u.Perms.SubscribeAllow {
			fmt.Fprintf(stdout, "  sub   %s\n", s)
		}
		if u.Perms.Responses {
			fmt.Fprintf(stdout, "  replies to requests it receives\n")
		}
		fmt.Fprintln(stdout)
	}
	if d.NodeAgents {
		fmt.Fprintf(stdout, "machine.<cluster>.<machine> — each machine, no static user: logged in by the bootstrapper's auth callout\n"+
			"  with its own secret, to its own health, fetch and inbox (services/bootstrapper MachinePermissions)\n")
	}
	return nil
}

// autoscalerHosts are the names the autoscaler-provider's server
// certificate is for: its compose service name and the host's loopback.
var autoscalerHosts = []string{natsconfig.AutoscalerProvider, "localhost", "127.0.0.1"}

// renderAutoscaler makes the autoscaler's mutual TLS in <dir>/autoscaler
// (kept while good) and copies the server's files into the
// autoscaler-provider's user directory.
func renderAutoscaler(l natsconfig.Layout) (bool, error) {
	dir := filepath.Join(l.Dir, natsconfig.AutoscalerDir)
	made, err := autoscalertls.Ensure(dir, autoscalerHosts, time.Now())
	if err != nil {
		return false, err
	}
	for src, dst := range map[string]string{
		autoscalertls.ServerCertFile: natsconfig.AutoscalerCertFile,
		autoscalertls.ServerKeyFile:  natsconfig.AutoscalerKeyFile,
		autoscalertls.CACertFile:     natsconfig.AutoscalerCAFile,
	} {
		b, err := os.ReadFile(filepath.Join(dir, src))
		if err != nil {
			return false, err
		}
		if err := writeFile(l.UserFile(natsconfig.AutoscalerProvider, dst), b, 0o600); err != nil {
			return false, err
		}
	}
	return made, nil
}

// autoscalerClient is `autoscaler-client --out DIR --cluster NAME --address
// HOST:PORT`: the cluster's client certificate and --cloud-config, signed
// by the CA the render made.
func autoscalerClient(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("autoscaler-client", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "deploy/local", "`directory` of the render")
	cluster := fs.String("cluster", "", "the workload `cluster` the autoscaler sizes (required)")
	address := fs.String("address", "127.0.0.1:8086", "`host:port` of the autoscaler-provider, as the autoscaler reaches it")
	if err := parse(fs, args, stdout); err != nil {
		return err
	}
	if *cluster == "" || fs.NArg() > 0 {
		return usageError{errors.New("give --cluster NAME (and no other argument)")}
	}
	c, err := autoscalertls.IssueClient(filepath.Join(*out, natsconfig.AutoscalerDir), *cluster, *address, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\nrun: cluster-autoscaler --cloud-provider=externalgrpc --cloud-config=%s --kubeconfig=<the cluster's kubeconfig>\n", c.Dir, c.CloudConfig)
	return nil
}
