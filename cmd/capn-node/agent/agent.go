// Package agent is capn-node, the node agent of a process or docker
// machine. It runs no kubelet or kubeadm: it is the part of a node that
// capn talks to. Given --kube-bin and bootstrap data of the kube-local
// provider, it also runs the machine's part of a real control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, and kwok in
// place of the kubelet: package kube).
//
//	start ─► claim the data dir (identity, boot count)
//	      ─► connect to NATS as capn-node.<cluster>.<machine>
//	      ─► bootstrap (once per checksum): request capn.bootstrap.fetch.<c>.<m>
//	         with the machine's checksum ─► check the checksum ─► parse the
//	         cloud-config or script ─► verify the join material's CA (and the
//	         pin) ─► write the files under <data-dir>/rootfs (mode, owner as
//	         far as it may) ─► record the commands and the checksum as applied
//	      ─► the preCommands, each under its timeout (package runcmd); the
//	         first failure fails the machine (condition BootstrapCommands)
//	      ─► with --kube-bin and /etc/capn/kube-local.json in the data: run
//	         the control plane, or join as a worker (package kube)
//	      ─► once joined, the postCommands
//	      ─► heartbeat now and every interval on capn.health.<c>.<m>.heartbeat
//	         (ready: bootstrapped and every command ran, and with a control
//	         plane, its API server answers /readyz; kubelet version = the
//	         machine's version), id heartbeat.<c>.<m>.<unix ms>; the control
//	         plane's state as node condition KubeControlPlane and the
//	         commands' as BootstrapCommands on capn.health.<c>.<m>.conditions
//	SIGTERM ─► stop heartbeats and the control plane, flush, close: exit 0.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/cmd/capn-node/kubeadm"
	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/providers/process/rehome"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
	"github.com/capn-dev/capn/services/daemon"
)

// HeartbeatKind is the last token of the heartbeat subject.
const HeartbeatKind = keys.HealthHeartbeat

// HeartbeatID is a heartbeat's event id: heartbeat.<cluster>.<machine>.<unix
// ms of the beat>, the scheme of the sim provider's nodes, so a repeated
// publish of one beat is stored once.
func HeartbeatID(cluster, machine string, at time.Time) string {
	return events.Subject("heartbeat", cluster, machine, strconv.FormatInt(at.UnixMilli(), 10))
}

// Agent is one machine's node agent. Build it with New; Run it once.
type Agent struct {
	cfg          Config
	log          zerolog.Logger
	bootstrapped atomic.Bool
	// kube is set when the machine runs a control plane (kube-local data
	// and --kube-bin).
	kube atomic.Pointer[kubeState]
	// kubeadm is set on a real node (RunCloudConfig) that kubeadm made a
	// control plane: it keeps the node's etcd member (package kubeadm).
	kubeadm atomic.Pointer[kubeadm.ControlPlane]
	// cloudConfigRoot is where RunCloudConfig writes write_files ("":
	// /; tests give a directory).
	cloudConfigRoot string
	// newKube builds the control-plane runtime (tests replace it).
	newKube func(*kubelocal.NodeConfig, kube.Options) (KubeRuntime, error)
	// lastConds are the conditions published last (heartbeat goroutine
	// only).
	lastConds []kube.NamedCondition
	// cmds is how the bootstrap commands are doing.
	cmds commandsStatus
	// rehomeCh carries Rehome requests (one kept).
	rehomeCh chan struct{}
}

// New checks cfg and returns its agent.
func New(cfg Config, log zerolog.Logger) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Agent{
		cfg: cfg, log: log.With().Str("cluster", cfg.Cluster).Str("machine", cfg.Machine).Logger(),
		newKube:  func(c *kubelocal.NodeConfig, o kube.Options) (KubeRuntime, error) { return kube.New(c, o) },
		rehomeCh: make(chan struct{}, 1),
	}, nil
}

// Bootstrapped reports whether the machine's bootstrap data is applied.
func (a *Agent) Bootstrapped() bool { return a.bootstrapped.Load() }

// Run runs the agent until ctx ends, then returns nil. It returns an error
// only when it cannot start (a data dir of another machine, refused NATS
// credentials).
func (a *Agent) Run(ctx context.Context) error {
	boots, err := claim(a.cfg.DataDir, a.cfg.String())
	if err != nil {
		return err
	}
	a.log.Info().Int("boot", boots).Str("data_dir", a.cfg.DataDir).Str("version", a.cfg.Version).
		Bool("kube", a.cfg.KubeBin != "").Msg("node agent starting (no kubelet runs)")
	if a.cfg.HealthAddr != "" {
		stop := a.serveHealth()
		defer stop()
	}
	nc, err := a.connect(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() {
		_ = nc.FlushTimeout(2 * time.Second)
		nc.Close()
	}()
	a.reportConnected(nc, a.cfg.NATS.URL)
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := a.bootstrap(ctx, nc); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// Commands run while the agent heartbeats, so that what they do is
	// seen as it happens; without any, the steps are done before the
	// first heartbeat, which then tells how the node is at once.
	steps := make(chan (<-chan struct{}), 1)
	if a.commandsPending() {
		go func() { steps <- a.runSteps(ctx) }()
	} else {
		steps <- a.runSteps(ctx)
	}
	// The connection's work (heartbeats, etcd commands) runs in a
	// session; a rehome ends it on the old connection and starts it on
	// the new one. The steps and the processes they supervise run on.
	cur := a.cfg.NATS
	for {
		next, nextCfg, err := a.session(ctx, nc, js, cur)
		if err != nil {
			nc.Close()
			<-<-steps
			return err
		}
		if next == nil {
			break
		}
		_ = nc.FlushTimeout(2 * time.Second)
		nc.Close()
		nc, cur = next, nextCfg
		if js, err = jetstream.New(nc); err != nil {
			nc.Close()
			<-<-steps
			return err
		}
	}
	<-<-steps // every command and child stopped before the agent says it stopped
	a.log.Info().Msg("node agent stopped")
	return nil
}

// session serves the connection nc (heartbeats, etcd and certificates
// commands) until
// ctx ends (nil, nil) or a rehome to another server succeeded: then it
// returns the new connection, already logged in, with its settings, and
// the caller closes nc. A rehome that fails leaves nc in use.
func (a *Agent) session(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cur daemon.NATSConfig) (*nats.Conn, daemon.NATSConfig, error) {
	sctx, stop := context.WithCancel(ctx)
	stopEtcd, err := a.serveEtcd(sctx, nc)
	if err != nil {
		stop()
		return nil, cur, fmt.Errorf("serve the etcd commands: %w", err)
	}
	stopPKI, err := a.servePKI(sctx, nc)
	if err != nil {
		stop()
		stopEtcd()
		return nil, cur, fmt.Errorf("serve the certificates commands: %w", err)
	}
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		a.heartbeats(sctx, events.NewPublisher(js, "capn/node/"+a.cfg.Cluster+"/"+a.cfg.Machine))
	}()
	end := func() {
		stop()
		<-beating
		stopEtcd()
		stopPKI()
	}
	for {
		select {
		case <-ctx.Done():
			end()
			return nil, cur, nil
		case <-a.rehomeCh:
		}
		next, cfg, ok := a.rehome(ctx, cur)
		if !ok {
			continue
		}
		end()
		// The new deployment hears of the node at once: its conditions
		// too, not only what changed since the last report to the old.
		a.lastConds = nil
		a.reportConnected(next, cfg.URL)
		return next, cfg, nil
	}
}

// Rehome asks the agent to read its data dir's connection request
// (package rehome) and move to that server: what SIGHUP does. It does not
// block; a request while one is handled is kept for after it.
func (a *Agent) Rehome() {
	select {
	case a.rehomeCh <- struct{}{}:
	default:
	}
}

// RehomeTimeout bounds how long the agent tries the new server (its login
// may be refused until the adopting deployment's records are read).
const RehomeTimeout = 30 * time.Second

// rehome dials the connection the data dir asks for, logging in as
// before, and returns it once the server accepted the login. No request,
// the connection in use, a bad request or a server that keeps refusing
// (within RehomeTimeout) keep the current connection: ok is false.
// Without a request the agent goes back to its command line's
// connection (the request was withdrawn: a move undone).
func (a *Agent) rehome(ctx context.Context, cur daemon.NATSConfig) (*nats.Conn, daemon.NATSConfig, bool) {
	cfg := a.cfg.NATS
	req, err := rehome.ReadConnection(a.cfg.DataDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		a.log.Warn().Err(err).Msg("rehome: bad connection request; staying connected where it is")
		return nil, cur, false
	default:
		cfg.URL, cfg.CredsFile, cfg.NKeySeedFile = req.URL, req.CredsFile, req.NKeyFile
		cfg.TLSCA, cfg.TLSCert, cfg.TLSKey, cfg.InboxPrefix = req.TLSCA, req.TLSCert, req.TLSKey, req.InboxPrefix
	}
	if cfg == cur {
		a.log.Info().Str("nats_url", cfg.URL).Msg("rehome: already connected there")
		return nil, cur, false
	}
	a.log.Info().Str("from", cur.URL).Str("to", cfg.URL).Msg("rehome: connecting to another NATS")
	rctx, cancel := context.WithTimeout(ctx, RehomeTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		nc, err := a.connectTo(rctx, cfg)
		if err == nil {
			a.log.Info().Str("nats_url", cfg.URL).Int("attempts", attempt).Msg("rehome: logged in at the new NATS; leaving the old")
			return nc, cfg, true
		}
		// A refused login is retried too: the adopting deployment may not
		// have read the machine's records yet.
		select {
		case <-rctx.Done():
			a.log.Warn().Err(err).Str("nats_url", cfg.URL).Msg("rehome: the new NATS did not accept the machine; staying connected where it is")
			return nil, cur, false
		case <-time.After(min(time.Duration(attempt)*200*time.Millisecond, 2*time.Second)):
		}
	}
}

// reportConnected records where the agent is connected (rehome.Connected):
// what an adopting provider waits for.
func (a *Agent) reportConnected(nc *nats.Conn, url string) {
	if err := rehome.WriteConnected(a.cfg.DataDir, rehome.Connected{URL: url, ServerID: nc.ConnectedServerId(), At: time.Now().UTC()}); err != nil {
		a.log.Warn().Err(err).Msg("cannot record the NATS connection")
	}
}

// Ready is what heartbeats report: never before every bootstrap command
// ran; then with a control plane, whether its API server answers /readyz;
// otherwise whether the bootstrap data is applied (and a kubeadm control
// plane has not left etcd).
func (a *Agent) Ready() bool {
	if _, done := a.cmds.get(); !done {
		return false
	}
	if ks := a.kube.Load(); ks != nil {
		return ks.ready()
	}
	if cp := a.kubeadm.Load(); cp != nil && cp.Left() {
		return false // a kubeadm control plane that left etcd serves nothing
	}
	return a.bootstrapped.Load()
}

// connect dials NATS (through the relay socket when set), retrying until
// ctx ends. Unless the config names other credentials, the agent logs in
// as its machine (keys.MachineUser) with its machine secret once it has
// one, else its bootstrap credential, read again at every (re)connect; the
// bootstrapper's auth callout checks either and grants the machine's own
// subjects only, under its own inbox prefix.
func (a *Agent) connect(ctx context.Context) (*nats.Conn, error) {
	return a.connectTo(ctx, a.cfg.NATS)
}

// connectTo is connect with the NATS settings cfg.
func (a *Agent) connectTo(ctx context.Context, cfg daemon.NATSConfig) (*nats.Conn, error) {
	var extra []nats.Option
	if a.cfg.NATSSocket != "" {
		extra = append(extra, nats.SetCustomDialer(socketDialer{path: a.cfg.NATSSocket}))
	}
	if machineLogin(cfg) {
		c, m := a.cfg.Cluster, a.cfg.Machine
		extra = append(extra, nats.UserInfoHandler(func() (string, string) {
			return keys.MachineUser(c, m), a.loginSecret()
		}))
		if cfg.InboxPrefix == "" {
			cfg.InboxPrefix = keys.MachineInboxPrefix(c, m)
		}
	}
	return daemon.Connect(ctx, cfg, "capn-node."+a.cfg.Cluster+"."+a.cfg.Machine, a.log, extra...)
}

// machineLogin reports whether the agent logs in as its machine: the
// config names no other credentials.
func machineLogin(c daemon.NATSConfig) bool {
	return c.User == "" && c.Token == "" && c.CredsFile == "" && c.NKeySeedFile == ""
}

// loginSecret is the machine secret (MachineSecretFile) once the
// bootstrap fetch stored it, else the bootstrap credential.
func (a *Agent) loginSecret() string {
	if b, err := os.ReadFile(filepath.Join(a.cfg.DataDir, StateDir, MachineSecretFile)); err == nil {
		return strings.TrimSpace(string(b))
	}
	cred, err := a.cfg.credential()
	if err != nil {
		a.log.Warn().Err(err).Msg("no machine secret and no bootstrap credential to log in with")
	}
	return cred
}

// socketDialer dials a unix socket whatever address NATS asks for.
type socketDialer struct{ path string }

func (d socketDialer) Dial(_, _ string) (net.Conn, error) {
	return net.DialTimeout("unix", d.path, 5*time.Second)
}

// bootstrap fetches, checks and applies the machine's bootstrap data,
// unless data with this checksum was applied before (a reboot). Failures
// are retried with backoff until ctx ends: a machine that cannot bootstrap
// never reports, and capn's node startup timeout replaces it.
func (a *Agent) bootstrap(ctx context.Context, nc *nats.Conn) error {
	if Applied(a.cfg.DataDir) == a.cfg.BootstrapChecksum {
		a.log.Info().Str("checksum", a.cfg.BootstrapChecksum).Msg("bootstrap data already applied")
		a.bootstrapped.Store(true)
		return nil
	}
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := a.bootstrapOnce(ctx, nc)
		if err == nil {
			a.bootstrapped.Store(true)
			return nil
		}
		if errors.Is(err, ErrUnsupportedFormat) {
			// Fetching again gives the same data: say so and let the
			// machine be replaced.
			a.log.Error().Err(err).Msg("bootstrap data this agent does not run")
			a.unsupported(err)
			return nil
		}
		var fe *sdk.FetchError
		final := errors.Is(err, ErrJoinMaterial) || (errors.As(err, &fe) && !fe.Retryable())
		if final {
			wait = a.cfg.FetchRetryMax
		}
		ev := a.log.Warn()
		if final {
			ev = a.log.Error()
		}
		ev.Err(err).Int("attempt", attempt).Dur("retry_in", wait).Msg("bootstrap failed")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, a.cfg.FetchRetryMax)
	}
}

func (a *Agent) bootstrapOnce(ctx context.Context, nc *nats.Conn) error {
	cred, err := a.cfg.credential()
	if err != nil {
		return err
	}
	data, err := sdk.FetchBootstrap(ctx, nc, a.cfg.Cluster, a.cfg.Machine, a.cfg.BootstrapChecksum, cred)
	if err != nil {
		return err
	}
	// The login after the join: kept before anything is applied, so that
	// a machine that joins can always log in again.
	if secret := data.GetMachineSecret(); secret != "" {
		if err := writeFile(filepath.Join(a.cfg.DataDir, StateDir, MachineSecretFile), []byte(secret+"\n"), 0o600); err != nil {
			return fmt.Errorf("keep the machine secret: %w", err)
		}
	}
	plan, err := Parse(data.GetFormat(), data.GetData())
	if errors.Is(err, ErrUnsupportedFormat) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrJoinMaterial, err)
	}
	ca, err := VerifyJoin(plan, a.cfg.CACertHash)
	if err != nil {
		return err
	}
	if a.cfg.RunCloudConfig && plan.Format == FormatCloudConfig {
		return a.runCloudConfig(ctx, data.GetData(), ca)
	}
	if err := Apply(a.cfg.DataDir, plan, a.cfg.BootstrapChecksum); err != nil {
		return fmt.Errorf("apply bootstrap data: %w", err)
	}
	for _, u := range plan.Unowned {
		a.log.Warn().Str("file", u).Msg("file written without its owner")
	}
	a.log.Info().Str("format", plan.Format).Int("files", len(plan.Files)).Int("pre_commands", len(plan.Pre)).
		Int("post_commands", len(plan.Post)).Int("commands_not_run", len(plan.NotRun())).
		Str("ca_cert_hash", ca).Bool("ca_pinned", a.cfg.CACertHash != "").Msg("bootstrap data applied")
	return nil
}

// readyCheckEvery is how often the heartbeat loop looks at the node's
// readiness between heartbeats (an atomic read or two).
const readyCheckEvery = 100 * time.Millisecond

// heartbeats reports the node now, every HeartbeatEvery, and at once when
// its readiness changes, until ctx ends: a node that becomes ready (its
// bootstrap commands ran, its control plane answers) says so within
// readyCheckEvery, not at the next heartbeat — which made every machine of
// a create wait up to HeartbeatEvery (10 s) to be Running — and one that
// stops being ready is reported as soon.
func (a *Agent) heartbeats(ctx context.Context, pub *events.Publisher) {
	t := time.NewTicker(a.cfg.HeartbeatEvery)
	defer t.Stop()
	check := time.NewTicker(min(readyCheckEvery, a.cfg.HeartbeatEvery))
	defer check.Stop()
	at := time.Now()
	for {
		ready := a.Ready()
		if err := a.beat(ctx, pub, at, ready); err != nil && ctx.Err() == nil {
			a.log.Warn().Err(err).Msg("heartbeat not published")
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case at = <-t.C:
				break wait
			case at = <-check.C:
				if a.Ready() != ready {
					break wait
				}
			}
		}
	}
}

func (a *Agent) beat(ctx context.Context, pub *events.Publisher, at time.Time, ready bool) error {
	c, m := a.cfg.Cluster, a.cfg.Machine
	hb := &capnv1.NodeHeartbeat{
		Cluster: c, Machine: m, NodeName: a.cfg.NodeName,
		Ready: ready, KubeletVersion: a.cfg.Version, Time: timestamppb.New(at),
	}
	_, err := pub.Publish(ctx, events.HealthSubject(c, m, HeartbeatKind), events.TypeNodeHeartbeat,
		HeartbeatID(c, m, at), hb, events.WithSubject(m))
	if conds := a.conditions(); len(conds) > 0 {
		err = errors.Join(err, a.publishConditions(ctx, pub, conds, at))
	}
	return err
}

// conditions are the control plane's (KubeControlPlane first, then the
// etcd ones; a kubeadm control plane's etcd ones only) and the bootstrap
// commands', when there is something to say.
func (a *Agent) conditions() []kube.NamedCondition {
	var out []kube.NamedCondition
	if ks := a.kube.Load(); ks != nil {
		out = ks.conditions()
	}
	if cp := a.kubeadm.Load(); cp != nil {
		out = append(out, cp.EtcdConditions()...)
	}
	if c, _ := a.cmds.get(); c != nil {
		out = append(out, kube.NamedCondition{Type: ConditionBootstrapCommands, Condition: *c})
	}
	return out
}

// publishConditions sends the control plane's state as node condition
// KubeControlPlane, with the etcd membership's conditions, when any of
// them changed since the last report sent. A leaving control plane's
// EtcdMemberRemoved goes this way: the machine-manager waits for it (as
// the health-watcher merges it into NodeHealth) before deleting the
// machine's infrastructure.
func (a *Agent) publishConditions(ctx context.Context, pub *events.Publisher, conds []kube.NamedCondition, at time.Time) error {
	if slices.Equal(conds, a.lastConds) {
		return nil
	}
	c, m := a.cfg.Cluster, a.cfg.Machine
	nc := &capnv1.NodeConditions{Cluster: c, Machine: m, Source: "capn-node", Time: timestamppb.New(at)}
	for _, cond := range conds {
		nc.Conditions = append(nc.Conditions, &capnv1.NodeCondition{
			Type: cond.Type, Status: cond.Status, Reason: cond.Reason, Message: cond.Message,
			LastTransitionTime: timestamppb.New(at),
		})
	}
	id := events.Subject("conditions", c, m, strconv.FormatInt(at.UnixMilli(), 10))
	if _, err := pub.Publish(ctx, events.HealthSubject(c, m, ConditionsKind), events.TypeNodeConditions, id, nc, events.WithSubject(m)); err != nil {
		return err
	}
	for i, cond := range conds {
		if i >= len(a.lastConds) || a.lastConds[i] != cond {
			a.log.Info().Str("type", cond.Type).Str("status", cond.Status).Str("reason", cond.Reason).Str("message", cond.Message).Msg("node condition sent")
		}
	}
	a.lastConds = conds
	return nil
}

// serveHealth serves GET /healthz on HealthAddr; a failure to listen is
// logged, not fatal (the address is a convenience). It returns a stop.
func (a *Agent) serveHealth() func() {
	ln, err := net.Listen("tcp", a.cfg.HealthAddr)
	if err != nil {
		a.log.Warn().Err(err).Str("health_addr", a.cfg.HealthAddr).Msg("cannot serve /healthz; going on without it")
		return func() {}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		c, done := a.cmds.get()
		switch {
		case c != nil && c.Status == "False":
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "capn-node %s: bootstrap commands failed (%s): %s\n", a.cfg, c.Reason, c.Message)
			return
		case !a.bootstrapped.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "capn-node %s: waiting for bootstrap data\n", a.cfg)
			return
		case !done:
			w.WriteHeader(http.StatusServiceUnavailable)
			msg := "starting"
			if c != nil {
				msg = c.Message
			}
			fmt.Fprintf(w, "capn-node %s: bootstrap commands: %s\n", a.cfg, msg)
			return
		}
		if ks := a.kube.Load(); ks != nil {
			c := ks.conditions()[0]
			if !ks.ready() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			fmt.Fprintf(w, "capn-node %s: control plane %s (%s): %s\n", a.cfg, c.Status, c.Reason, c.Message)
			return
		}
		fmt.Fprintf(w, "capn-node %s: bootstrapped; no kubelet runs\n", a.cfg)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	a.log.Info().Str("health_addr", ln.Addr().String()).Msg("serving /healthz")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
}
