package gateway

import (
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/ui"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// server is the HTTP API. It holds no state of its own besides the watch
// hub: every request reads or writes KV and JetStream. Safe for concurrent
// use once built.
type server struct {
	log zerolog.Logger
	nc  *nats.Conn
	js  jetstream.JetStream
	// pub publishes the facts the API causes (hook added or released).
	pub     *events.Publisher
	auth    *authenticator
	limiter *rateLimiter
	// authFailures limits failed authentications per client address.
	authFailures *rateLimiter
	// hosts are the Host headers that name the gateway (origin.go).
	hosts hostPolicy
	// streams caps the open watch and timeline streams (streams.go).
	streams *streamSlots
	limits  Limits
	now     func() time.Time
	// heartbeat is the SSE keep-alive interval.
	heartbeat time.Duration
	validator manifest.Validator
	metrics   *metrics

	clusters        *store.Bucket[*capnv1.Cluster]
	machines        *store.Bucket[*capnv1.Machine]
	clusterStatuses *store.Bucket[*capnv1.ClusterStatus]
	machineStatuses *store.Bucket[*capnv1.MachineStatus]
	secretsStatuses *store.Bucket[*capnv1.ClusterSecretsStatus]
	// kubeconfigs opens sealed kubeconfigs; nil without a secrets key.
	kubeconfigs *store.Bucket[*capnv1.AdminKubeconfig]
	// Add-on sets (desired), their records (observed) and add-on secrets
	// (sealed; nil without a secrets key).
	addonSets     *store.Bucket[*capnv1.AddonSet]
	addonStatuses *store.Bucket[*capnv1.ClusterAddonStatus]
	// controlPlanes are the control-plane records (observed
	// controlplane.<c>), written by each cluster's implementation.
	controlPlanes *store.Bucket[*capnv1.ControlPlaneRecord]
	addonSecrets  *store.Bucket[*capnv1.AddonSecret]
	// bootstrapSecrets: written and deleted, never read back to a client.
	bootstrapSecrets *store.Bucket[*capnv1.BootstrapSecret]
	// externalKubeconfigs: registered kubeconfigs of external clusters,
	// given back without their credentials.
	externalKubeconfigs *store.Bucket[*capnv1.ExternalKubeconfig]
	// Cluster classes and their revisions (desired clusterclass.* and
	// classrev.*), rollouts (desired) and their statuses (observed, the
	// fleet-manager's).
	classes         *store.Bucket[*capnv1.ClusterClass]
	rollouts        *store.Bucket[*capnv1.Rollout]
	rolloutStatuses *store.Bucket[*capnv1.RolloutStatus]
	// versions are the Kubernetes version catalogues (desired
	// kubernetesversions.<name>) auto-patch picks from.
	versions *store.Bucket[*capnv1.KubernetesVersions]

	// scheduleStatuses reads the scheduled backups' state (observed
	// backup.schedule); objects is the backups object store (objectStore:
	// opened on first use); keyIDs are the ids of the secrets keys this
	// gateway holds, which a restore's sealed secrets must be sealed with.
	scheduleStatuses *store.Bucket[*capnv1.BackupScheduleStatus]
	objectsMu        sync.Mutex
	objects          jetstream.ObjectStore
	keyIDs           []string

	// caStatuses and certStatuses read the CA rotations' and leaf
	// certificates' state (observed backup.ca-<c>, backup.certs-<c>).
	caStatuses   *store.Bucket[*capnv1.CARotationStatus]
	certStatuses *store.Bucket[*capnv1.CertificatesStatus]

	hub *hub
	// desiredKV is read for its last revision when a watch opens.
	desiredKV jetstream.KeyValue
	// stopping is closed when the HTTP server shuts down, so that streams
	// (SSE) end and let it finish.
	stopping <-chan struct{}

	mux *http.ServeMux
}

// The dashboard's routes, served without authentication.
const (
	uiIndexRoute = "GET /{$}"
	uiFilesRoute = "GET " + ui.Prefix
)

// apiHandler handles one route; a returned error becomes a problem response
// unless the handler already wrote one.
type apiHandler func(w http.ResponseWriter, r *http.Request) error

// routes registers every endpoint with the scope it needs and the largest
// body it accepts.
func (s *server) routes() {
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /healthz", s.healthz)
	// The dashboard's static files: no token (they hold none); the page
	// asks for one and sends it on its API calls.
	dash := ui.Handler()
	s.mux.Handle(uiIndexRoute, dash)
	s.mux.Handle(uiFilesRoute, dash)
	// The dashboard's login link: the code is the credential.
	s.mux.HandleFunc(loginRoute, s.login)

	s.handle("GET /v1/clusters", scopeRead, 0, s.listClusters)
	s.handle("POST /v1/clusters", scopeWrite, s.limits.ManifestBytes, s.applyCluster)
	s.handle("GET /v1/clusters/{name}", scopeRead, 0, s.getCluster)
	s.handle("PUT /v1/clusters/{name}", scopeWrite, s.limits.ManifestBytes, s.putCluster)
	s.handle("DELETE /v1/clusters/{name}", scopeWrite, s.limits.RequestBytes, s.deleteCluster)
	s.handle("POST /v1/clusters/{name}/scale", scopeWrite, s.limits.RequestBytes, s.scaleCluster)
	s.handle("POST /v1/clusters/{name}/upgrade", scopeWrite, s.limits.RequestBytes, s.upgradeCluster)
	s.handle("POST /v1/clusters/{name}/pause", scopeWrite, s.limits.RequestBytes, s.pauseCluster)
	s.handle("POST /v1/clusters/{name}/resume", scopeWrite, s.limits.RequestBytes, s.resumeCluster)
	s.handle("POST /v1/clusters/{name}/hibernate", scopeWrite, s.limits.RequestBytes, s.hibernateCluster)
	s.handle("POST /v1/clusters/{name}/wake", scopeWrite, s.limits.RequestBytes, s.wakeCluster)
	s.handle("GET /v1/clusters/{name}/machines", scopeRead, 0, s.listMachines)
	s.handle("GET /v1/clusters/{name}/machines/{machine}", scopeRead, 0, s.getMachine)
	s.handle("DELETE /v1/clusters/{name}/machines/{machine}", scopeWrite, s.limits.RequestBytes, s.deleteMachine)
	s.handle("GET /v1/clusters/{name}/hooks", scopeRead, 0, s.listHooks)
	s.handle("POST /v1/clusters/{name}/machines/{machine}/hooks", scopeWrite, s.limits.RequestBytes, s.addHook)
	s.handle("DELETE /v1/clusters/{name}/machines/{machine}/hooks/{phase}/{hook}", scopeWrite, s.limits.RequestBytes, s.releaseHook)
	s.handle("GET /v1/clusters/{name}/kubeconfig", scopeSecrets, 0, s.getKubeconfig)
	s.handle("GET /v1/clusters/{name}/events", scopeRead, 0, s.timeline)
	s.handle("GET /v1/clusters/{name}/addons", scopeRead, 0, s.clusterAddons)
	s.handle("GET /v1/clusters/{name}/controlplane", scopeRead, 0, s.getControlPlane)
	s.handle("GET /v1/addonsets", scopeRead, 0, s.listAddonSets)
	s.handle("POST /v1/addonsets", scopeWrite, s.limits.ManifestBytes, s.applyAddonSet)
	s.handle("GET /v1/addonsets/{name}", scopeRead, 0, s.getAddonSet)
	s.handle("PUT /v1/addonsets/{name}", scopeWrite, s.limits.ManifestBytes, s.putAddonSet)
	s.handle("DELETE /v1/addonsets/{name}", scopeWrite, s.limits.RequestBytes, s.deleteAddonSet)
	// Add-on secrets are written, never read back: write and secrets.
	s.handle("PUT /v1/addonsecrets/{name}", scopeWrite|scopeSecrets, s.limits.ManifestBytes, s.putAddonSecret)
	s.handle("DELETE /v1/addonsecrets/{name}", scopeWrite|scopeSecrets, s.limits.RequestBytes, s.deleteAddonSecret)
	s.handle("PUT /v1/bootstrapsecrets/{name}", scopeWrite|scopeSecrets, s.limits.ManifestBytes, s.putBootstrapSecret)
	s.handle("DELETE /v1/bootstrapsecrets/{name}", scopeWrite|scopeSecrets, s.limits.RequestBytes, s.deleteBootstrapSecret)
	// External clusters' kubeconfigs: written with write and secrets, read
	// back (without credentials) with secrets.
	s.handle("PUT /v1/externalkubeconfigs/{name}", scopeWrite|scopeSecrets, s.limits.ManifestBytes, s.putExternalKubeconfig)
	s.handle("GET /v1/externalkubeconfigs/{name}", scopeSecrets, 0, s.getExternalKubeconfig)
	s.handle("DELETE /v1/externalkubeconfigs/{name}", scopeWrite|scopeSecrets, s.limits.RequestBytes, s.deleteExternalKubeconfig)
	s.handle("GET /v1/clusterclasses", scopeRead, 0, s.listClasses)
	s.handle("POST /v1/clusterclasses", scopeWrite, s.limits.ManifestBytes, s.applyClass)
	s.handle("GET /v1/clusterclasses/{name}", scopeRead, 0, s.getClass)
	s.handle("DELETE /v1/clusterclasses/{name}", scopeWrite, s.limits.RequestBytes, s.deleteClass)
	s.handle("GET /v1/rollouts", scopeRead, 0, s.listRollouts)
	s.handle("POST /v1/rollouts", scopeWrite, s.limits.ManifestBytes, s.createRollout)
	s.handle("GET /v1/rollouts/{name}", scopeRead, 0, s.getRollout)
	s.handle("POST /v1/rollouts/{name}/pause", scopeWrite, s.limits.RequestBytes, s.rolloutAction("pause"))
	s.handle("POST /v1/rollouts/{name}/resume", scopeWrite, s.limits.RequestBytes, s.rolloutAction("resume"))
	s.handle("POST /v1/rollouts/{name}/abort", scopeWrite, s.limits.RequestBytes, s.rolloutAction("abort"))
	s.handle("GET /v1/kubernetesversions/{name}", scopeRead, 0, s.getVersions)
	s.handle("PUT /v1/kubernetesversions/{name}", scopeWrite, s.limits.ManifestBytes, s.putVersions)
	s.handle("GET /v1/watch", scopeRead, 0, s.watch)
	s.handle("POST /v1/backups", scopeSecrets, s.limits.RequestBytes, s.createBackup)
	s.handle("GET /v1/backups", scopeRead, 0, s.listBackups)
	s.handle("GET /v1/backups/{name}", scopeSecrets, 0, s.getBackup)
	s.handle("POST /v1/restores", scopeSecrets|scopeWrite, s.limits.RestoreBytes, s.restore)
	s.handle("POST /v1/clusters/{name}/etcd-snapshots", scopeSecrets, s.limits.RequestBytes, s.createEtcdSnapshot)
	s.handle("GET /v1/clusters/{name}/etcd-snapshots", scopeRead, 0, s.listEtcdSnapshots)
	s.handle("POST /v1/clusters/{name}/etcd-restores", scopeSecrets|scopeWrite, s.limits.RequestBytes, s.restoreEtcd)
	s.handle("POST /v1/clusters/{name}/rotate-ca", scopeSecrets|scopeWrite, s.limits.RequestBytes, s.rotateCA)
	s.handle("POST /v1/events", scopeIngest, s.limits.IngestRequestBytes, s.ingest)
	// Any authenticated principal: the checks are in the handlers.
	s.handle(loginsRoute, 0, s.limits.RequestBytes, s.createLogin)
	s.handle("GET "+sessionRoute, 0, 0, s.getSession)
	s.handle("DELETE "+sessionRoute, 0, 0, s.deleteSession)
}

// handle registers h on pattern behind the scope check and the body limit
// (maxBody 0: the request must have no body to speak of, 4 KiB).
func (s *server) handle(pattern string, need scopeSet, maxBody int64, h apiHandler) {
	if maxBody <= 0 {
		maxBody = 4 << 10
	}
	route := pattern
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := principalFrom(r.Context())
		if !p.scopes.has(need) {
			writeProblem(w, r, forbidden(p, need))
			return
		}
		if r.ContentLength > maxBody {
			writeProblem(w, r, tooLarge(maxBody))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		if err := h(w, r); err != nil {
			s.fail(w, r, route, err)
		}
	}))
}

// fail answers a handler's error, unless the response was already started
// (a stream that broke), in which case it is only logged.
func (s *server) fail(w http.ResponseWriter, r *http.Request, route string, err error) {
	p, internal := asProblem(err)
	log := zerolog.Ctx(r.Context())
	if internal {
		log.Error().Err(err).Str("route", route).Int("status", p.Status).Msg("request failed")
	} else {
		log.Debug().Err(err).Str("route", route).Int("status", p.Status).Msg("request refused")
	}
	if rw, ok := w.(*responseWriter); ok && rw.status != 0 {
		return
	}
	writeProblem(w, r, p)
}

func tooLarge(limit int64) *problemError {
	return problem(http.StatusRequestEntityTooLarge, api.ProblemTooLarge, "Request body too large",
		"the body is larger than %d bytes", limit)
}

// ServeHTTP is the middleware chain: panic recovery, logging and metrics,
// /healthz, the Host and Origin checks (origin.go), the dashboard's static
// files and its login link without authentication, the per-address limit
// of failed authentications, authentication (auth.go), the per-principal
// rate limit, then the route (404 and 405 as problems too).
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.now()
	rw := &responseWriter{ResponseWriter: w}
	_, pattern := s.mux.Handler(r)
	route := pattern
	if route == "" {
		route = "unmatched"
	}
	log := s.log.With().Str("method", r.Method).Str("path", r.URL.Path).Logger()
	r = r.WithContext(log.WithContext(r.Context()))
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			log.Error().Interface("panic", v).Str("stack", string(debug.Stack())).Msg("handler panicked")
			if rw.status == 0 {
				writeProblem(rw, r, problem(http.StatusInternalServerError, api.ProblemInternal, "Internal error", "the gateway failed to handle the request; the error is logged"))
			}
		}
		s.metrics.observe(route, rw.status, s.now().Sub(start))
		ev := log.Debug()
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			ev = log.Info()
		}
		ev.Str("route", route).Int("status", rw.status).Dur("duration", s.now().Sub(start)).Msg("request")
	}()

	if r.URL.Path == "/healthz" {
		s.mux.ServeHTTP(rw, r)
		return
	}
	if perr := s.checkEdge(r); perr != nil {
		log.Info().Str("host", r.Host).Str("origin", r.Header.Get("Origin")).Int("status", perr.Status).Msg("request refused at the edge")
		writeProblem(rw, r, perr)
		return
	}
	if pattern == uiIndexRoute || pattern == uiFilesRoute || pattern == loginRoute {
		s.mux.ServeHTTP(rw, r)
		return
	}
	// Failed authentications are limited per address before any token is
	// looked at, so guessing tokens is slow.
	addr := clientAddr(r)
	if perr := s.authFailures.spent(addr); perr != nil {
		writeProblem(rw, r, perr)
		return
	}
	p, perr := s.auth.authenticate(r)
	if perr != nil {
		_ = s.authFailures.allow(addr)
		writeProblem(rw, r, perr)
		return
	}
	log = log.With().Str("principal", p.name).Logger()
	r = r.WithContext(withPrincipal(log.WithContext(r.Context()), p))
	if perr := s.limiter.allow(p.rateKey(r)); perr != nil {
		writeProblem(rw, r, perr)
		return
	}
	if pattern == "" {
		s.unmatched(rw, r)
		return
	}
	s.mux.ServeHTTP(rw, r)
}

// unmatched answers a request no route takes: 405 with Allow when the path
// exists for other methods, else 404.
func (s *server) unmatched(w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := s.mux.Handler(probe); p != "" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) == 0 {
		writeProblem(w, r, notFound("no endpoint %s; see docs/api.md", r.URL.Path))
		return
	}
	p := problem(http.StatusMethodNotAllowed, api.ProblemMethodNotAllowed, "Method not allowed",
		"%s does not take %s; it takes %s", r.URL.Path, r.Method, strings.Join(allowed, ", "))
	p.header = http.Header{"Allow": {strings.Join(allowed, ", ")}}
	writeProblem(w, r, p)
}

// healthz is 200 while the NATS connection is up, else 503. It needs no
// token.
func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	if s.nc != nil && !s.nc.IsConnected() {
		writeProblem(w, r, unavailable("not connected to NATS (%s)", s.nc.Status()))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// responseWriter records the status for logs, metrics and for telling
// whether a response was started. It passes Flush and the deadline setters
// through (http.ResponseController uses Unwrap).
type responseWriter struct {
	http.ResponseWriter
	status int
}

func (w *responseWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
