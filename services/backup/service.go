// Package backup is the backup service: consistent backups of the
// management plane (desired, observed and the sealed secrets, each read
// at one point), kept in the backups object store, taken on request
// (capn.backup.create: the gateway's POST /v1/backups) and on a schedule,
// and restores of them (capn.backup.restore: POST /v1/restores), which
// hand the backed-up infrastructure to its providers to adopt instead of
// creating anything. See README.md.
package backup

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/schemas/backupfile"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/services/daemon"
)

// Name is the service's name (and its NATS user's).
const Name = "backup"

// Defaults of Config.
const (
	DefaultKeep      = 10
	DefaultAdoptWait = 30 * time.Second
)

// Config configures the backup service; zero fields take the defaults.
type Config struct {
	// Every is the interval of scheduled backups; 0 takes none.
	Every time.Duration
	// Keep is how many backups the object store keeps (the newest;
	// default 10). Every backup counts, scheduled or asked for.
	Keep int
	// MaxBytes bounds one bucket's read (store.DefaultSnapshotMaxBytes).
	MaxBytes int
	// Now is the clock (default time.Now).
	Now func() time.Time

	// Keyring seals and opens workload clusters' etcd snapshots (the
	// secrets bucket's key: a snapshot holds the cluster's Secrets). Without
	// one (and no KeyFile or CAPN_SECRETS_KEY), etcd snapshots are refused;
	// management-plane backups need no key.
	Keyring *seal.Keyring
	// KeyFile and OldKeyFiles load Keyring (--secrets-key-file,
	// --secrets-old-key-files).
	KeyFile, OldKeyFiles string
	// EtcdWait bounds each step of an etcd snapshot or restore asked of a
	// node agent (default 30s; a restore's prepare gets twice as long).
	EtcdWait time.Duration
	// EtcdRestoreWait bounds the wait for a restored cluster's members and
	// API servers to be healthy again (default 5m).
	EtcdRestoreWait time.Duration
	// EtcdMaxBytes bounds one etcd snapshot (default 1 GiB).
	EtcdMaxBytes int64
	// CertCheckEvery is how often every kube-local cluster's leaf
	// certificates are checked and those due renewed (default 1h).
	CertCheckEvery time.Duration
	// EtcdScheduleTick is how often the clusters' snapshot policies are
	// looked at (default 10s).
	EtcdScheduleTick time.Duration
}

// Service is the backup service.
type Service struct {
	cfg Config

	log      zerolog.Logger
	nc       *nats.Conn
	js       jetstream.JetStream
	objects  jetstream.ObjectStore
	kv       map[string]jetstream.KeyValue
	schedule *store.Bucket[*capnv1.BackupScheduleStatus]
	pub      *events.Publisher
	metrics  *metrics
	// restoring serialises restores: two at once would race for the same
	// keys and report each other's writes as conflicts.
	restoring sync.Mutex

	etcdObjects jetstream.ObjectStore
	clusters    *store.Bucket[*capnv1.Cluster]
	machines    *store.Bucket[*capnv1.Machine]
	etcdStatus  *store.Bucket[*capnv1.EtcdSnapshotStatus]
	// etcdRestoring serialises etcd restores.
	etcdRestoring sync.Mutex

	// caRotating holds the clusters whose CA rotation runs now.
	caRotating sync.Map
	caStatus   *store.Bucket[*capnv1.CARotationStatus]
	certStatus *store.Bucket[*capnv1.CertificatesStatus]
}

var (
	_ daemon.Service      = (*Service)(nil)
	_ daemon.FlagProvider = (*Service)(nil)
	_ daemon.Validator    = (*Service)(nil)
)

// New returns the service, as cmd/backup and capn dev run it.
func New(cfg Config) *Service {
	if cfg.Keep == 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.EtcdWait == 0 {
		cfg.EtcdWait = 30 * time.Second
	}
	if cfg.EtcdRestoreWait == 0 {
		cfg.EtcdRestoreWait = 5 * time.Minute
	}
	if cfg.EtcdMaxBytes == 0 {
		cfg.EtcdMaxBytes = 1 << 30
	}
	if cfg.EtcdScheduleTick == 0 {
		cfg.EtcdScheduleTick = DefaultEtcdScheduleTick
	}
	return &Service{cfg: cfg}
}

// Name implements daemon.Service.
func (s *Service) Name() string { return Name }

// Flags implements daemon.FlagProvider.
func (s *Service) Flags() []daemon.Flag {
	return []daemon.Flag{
		{Name: "backup-every", Env: "CAPN_BACKUP_EVERY", Usage: "take a scheduled backup this often (0: no scheduled backups)", Value: daemon.DurationValue(&s.cfg.Every)},
		{Name: "backup-keep", Env: "CAPN_BACKUP_KEEP", Usage: "how many backups the backups object store keeps (the newest)", Value: daemon.IntValue(&s.cfg.Keep)},
		{Name: "secrets-key-file", Env: "CAPN_SECRETS_KEY_FILE", Usage: "file with the secrets bucket's key, to seal workload clusters' etcd snapshots (or set " + seal.KeyEnv + "); without one, etcd snapshots are refused", Value: daemon.StringValue(&s.cfg.KeyFile)},
		{Name: "secrets-old-key-files", Env: "CAPN_SECRETS_OLD_KEY_FILES", Usage: "comma-separated files with older keys, to open etcd snapshots sealed before a rotation", Value: daemon.StringValue(&s.cfg.OldKeyFiles)},
	}
}

// Validate implements daemon.Validator.
func (s *Service) Validate() error {
	var errs []error
	if s.cfg.Every < 0 {
		errs = append(errs, &daemon.FieldError{Flag: "backup-every", Env: "CAPN_BACKUP_EVERY", Value: s.cfg.Every.String(), Problem: "must not be negative (0: no scheduled backups)"})
	} else if s.cfg.Every > 0 && s.cfg.Every < time.Second {
		errs = append(errs, &daemon.FieldError{Flag: "backup-every", Env: "CAPN_BACKUP_EVERY", Value: s.cfg.Every.String(), Problem: "must be at least 1s"})
	}
	if s.cfg.Keep < 1 {
		errs = append(errs, &daemon.FieldError{Flag: "backup-keep", Env: "CAPN_BACKUP_KEEP", Value: fmt.Sprint(s.cfg.Keep), Problem: "must be at least 1"})
	}
	return errors.Join(errs...)
}

// Run implements daemon.Service: it answers backup and restore requests
// and takes the scheduled backups until ctx ends.
func (s *Service) Run(ctx context.Context, d *daemon.Deps) error {
	if err := s.Validate(); err != nil {
		return err
	}
	s.log, s.nc, s.js = d.Log, d.NC, d.JS
	var err error
	if s.cfg.Keyring == nil {
		if s.cfg.Keyring, err = seal.LoadKeyring(s.cfg.KeyFile, s.cfg.OldKeyFiles); err != nil {
			return err
		}
	}
	if s.etcdObjects, err = d.JS.ObjectStore(ctx, events.ObjectEtcdSnapshots); err != nil {
		return fmt.Errorf("object store %s: %w", events.ObjectEtcdSnapshots, err)
	}
	if s.objects, err = d.JS.ObjectStore(ctx, events.ObjectBackups); err != nil {
		return fmt.Errorf("object store %s: %w", events.ObjectBackups, err)
	}
	s.kv = map[string]jetstream.KeyValue{}
	for _, b := range backupfile.Buckets {
		if s.kv[b], err = d.JS.KeyValue(ctx, b); err != nil {
			return fmt.Errorf("bucket %s: %w", b, err)
		}
	}
	s.schedule = store.NewBucket(s.kv[backupfile.BucketObserved], store.New[capnv1.BackupScheduleStatus]())
	s.etcdStatus = store.NewBucket(s.kv[backupfile.BucketObserved], store.New[capnv1.EtcdSnapshotStatus]())
	s.clusters = store.NewBucket(s.kv[backupfile.BucketDesired], store.New[capnv1.Cluster]())
	s.caStatus = store.NewBucket(s.kv[backupfile.BucketObserved], store.New[capnv1.CARotationStatus]())
	s.certStatus = store.NewBucket(s.kv[backupfile.BucketObserved], store.New[capnv1.CertificatesStatus]())
	s.machines = store.NewBucket(s.kv[backupfile.BucketDesired], store.New[capnv1.Machine]())
	s.pub = events.NewPublisher(d.JS, "capn/"+Name)
	if s.metrics, err = newMetrics(d.Metrics); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}

	// Each request is answered in a goroutine of its own (a restore waits
	// for adoptions); stopping waits for those in flight, and a request
	// that arrives while stopping is not taken (its caller times out and
	// may ask again).
	var wg sync.WaitGroup
	var mu sync.Mutex
	stopping := false
	serve := func(subject string, h func(context.Context, []byte) proto.Message) (*nats.Subscription, error) {
		return d.NC.QueueSubscribe(subject, Name, func(m *nats.Msg) {
			mu.Lock()
			if stopping {
				mu.Unlock()
				return
			}
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				reply := h(ctx, m.Data)
				data, err := proto.Marshal(reply)
				if err == nil {
					err = m.Respond(data)
				}
				if err != nil {
					s.log.Warn().Err(err).Str("subject", subject).Msg("cannot answer")
				}
			}()
		})
	}
	var subs []*nats.Subscription
	for subject, h := range map[string]func(context.Context, []byte) proto.Message{
		keys.BackupRequest("create"):         s.onCreate,
		keys.BackupRequest("restore"):        s.onRestore,
		keys.BackupRequest(VerbEtcdSnapshot): s.onEtcdSnapshot,
		keys.BackupRequest(VerbEtcdList):     s.onEtcdList,
		keys.BackupRequest(VerbEtcdRestore):  s.onEtcdRestore,
		keys.BackupRequest(VerbRotateCA):     s.onRotateCA,
	} {
		sub, err := serve(subject, h)
		if err != nil {
			return fmt.Errorf("serve %s: %w", subject, err)
		}
		subs = append(subs, sub)
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = d.NC.FlushWithContext(fctx)
	cancel()
	if err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); s.runSchedule(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); s.runEtcdSchedule(ctx) }()
	if s.cfg.Keyring != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.runCertSchedule(ctx) }()
	}
	d.Ready.Set(true)
	s.log.Info().Dur("every", s.cfg.Every).Int("keep", s.cfg.Keep).Msg("backup service serving")
	<-ctx.Done()
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
	mu.Lock()
	stopping = true
	mu.Unlock()
	wg.Wait()
	return nil
}

// onCreate answers capn.backup.create.
func (s *Service) onCreate(ctx context.Context, data []byte) proto.Message {
	req := &capnv1.CreateBackup{}
	if err := proto.Unmarshal(data, req); err != nil {
		return &capnv1.BackupResult{Error: refuse(CodeInvalid, "the request does not decode: "+err.Error())}
	}
	trigger := req.GetTrigger()
	switch trigger {
	case "":
		trigger = TriggerAPI
	case TriggerAPI, TriggerMove:
	default:
		return &capnv1.BackupResult{Error: refuse(CodeInvalid, fmt.Sprintf("trigger %q: want api or move", trigger))}
	}
	log := s.log.With().Str("trigger", trigger).Str("requested_by", req.GetRequestedBy()).Strs("clusters", req.GetClusters()).Logger()
	log.Info().Msg("taking a backup")
	m, berr := s.backup(log.WithContext(ctx), req.GetClusters(), trigger)
	if berr != nil {
		log.Warn().Str("code", berr.GetCode()).Str("error", berr.GetMessage()).Msg("backup refused or failed")
		return &capnv1.BackupResult{Error: berr}
	}
	return &capnv1.BackupResult{Manifest: m, Object: m.GetName()}
}

// capnVersion is the module's version, or "dev".
func capnVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
