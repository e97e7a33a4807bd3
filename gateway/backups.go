package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/schemas/backupfile"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// Backups and restores are the backup service's work (services/backup):
// the gateway asks it over NATS (capn.backup.create, capn.backup.restore)
// and moves the files between HTTP and the backups object store. It never
// opens a file's secrets, and never writes state of its own: a restore's
// writes are the backup service's.

// backupTimeout bounds the backup service's answer to a backup; a
// restore's is its adopt wait plus this.
const backupTimeout = 2 * time.Minute

// metaManifest and uploadPrefix are the backup service's (services/backup:
// metaManifest, UploadPrefix): a stored backup's manifest in its object's
// metadata, and the names of files uploaded to be restored.
const (
	metaManifest = "capn-manifest"
	uploadPrefix = "upload-"
)

// backupMediaTypes are what POST /v1/restores reads.
var backupMediaTypes = mediaTypes{api.MediaBackup, "application/octet-stream"}

// objectStore is the backups object store, opened on first use: a
// deployment provisioned before backups existed has none until it is
// provisioned again, and answers 503 until then.
func (s *server) objectStore(ctx context.Context) (jetstream.ObjectStore, error) {
	s.objectsMu.Lock()
	defer s.objectsMu.Unlock()
	if s.objects != nil {
		return s.objects, nil
	}
	o, err := s.js.ObjectStore(ctx, events.ObjectBackups)
	if err != nil {
		return nil, unavailable("the backups object store %s cannot be opened (%v): provision the deployment again (capn-nats-config provision)", events.ObjectBackups, err)
	}
	s.objects = o
	return o, nil
}

// askBackup sends req to the backup service and decodes its answer into
// reply. No backup service is a 503.
func (s *server) askBackup(ctx context.Context, verb string, req, reply proto.Message, timeout time.Duration) error {
	data, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := s.nc.RequestWithContext(ctx, keys.BackupRequest(verb), data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return unavailable("the backup service is not running: start it (capn dev runs it; a deployment runs the backup program)")
	case errors.Is(err, context.DeadlineExceeded):
		return unavailable("the backup service did not answer within %s", timeout)
	case err != nil:
		return fmt.Errorf("ask the backup service: %w", err)
	}
	if err := proto.Unmarshal(msg.Data, reply); err != nil {
		return fmt.Errorf("the backup service's answer does not decode: %w", err)
	}
	return nil
}

// backupProblem is the problem of a refused backup service request.
func backupProblem(e *capnv1.BackupError) error {
	var p *problemError
	switch e.GetCode() {
	case "invalid":
		p = problem(http.StatusUnprocessableEntity, api.ProblemInvalidBackup, "Invalid backup", "%s", e.GetMessage())
	case "not_found":
		p = notFound("%s", e.GetMessage())
	case "not_empty":
		p = problem(http.StatusConflict, api.ProblemNotEmpty, "Deployment not empty", "%s", e.GetMessage())
	case "keys":
		p = problem(http.StatusConflict, api.ProblemSealKeys, "Secrets sealed with another key", "%s", e.GetMessage())
	default:
		return fmt.Errorf("backup service: %s", e.GetMessage())
	}
	for _, d := range e.GetDetails() {
		p.Errors = append(p.Errors, api.FieldViolation{Path: "file", Reason: d})
	}
	return p
}

// createBackup is POST /v1/backups (scope secrets): the backup service
// takes a backup (of the clusters the body names, else of everything),
// and the answer is its file.
func (s *server) createBackup(w http.ResponseWriter, r *http.Request) error {
	var body api.BackupRequest
	if err := bodyMediaTypes.check(r); err != nil {
		return err
	}
	data, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			return badRequest("the body is not a backup request: %v", err)
		}
	}
	for i, c := range body.Clusters {
		if err := checkName(fmt.Sprintf("clusters[%d]", i), c); err != nil {
			return err
		}
	}
	if body.Trigger != "" && body.Trigger != "api" && body.Trigger != "move" {
		return badRequest("trigger %q is not valid", body.Trigger).withField("trigger", `must be "api" (the default) or "move"`, body.Trigger)
	}
	objects, err := s.objectStore(r.Context())
	if err != nil {
		return err
	}
	res := &capnv1.BackupResult{}
	req := &capnv1.CreateBackup{Clusters: body.Clusters, Trigger: body.Trigger, RequestedBy: principalFrom(r.Context()).name}
	if err := s.askBackup(r.Context(), "create", req, res, backupTimeout); err != nil {
		return err
	}
	if res.GetError() != nil {
		return backupProblem(res.GetError())
	}
	return s.sendBackup(w, r, objects, res.GetObject())
}

// sendBackup answers with a stored backup's file.
func (s *server) sendBackup(w http.ResponseWriter, r *http.Request, objects jetstream.ObjectStore, name string) error {
	obj, err := objects.Get(r.Context(), name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return notFound("no backup %s", name)
	}
	if err != nil {
		return err
	}
	defer obj.Close()
	info, err := obj.Info()
	if err != nil {
		return err
	}
	m := manifestOf(info)
	w.Header().Set("Content-Type", api.MediaBackup)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.capnbackup"`)
	w.Header().Set(api.HeaderBackupName, name)
	if m != nil {
		w.Header().Set(api.HeaderBackupSHA256, m.GetSha256())
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, obj); err != nil {
		return fmt.Errorf("send backup %s: %w", name, err)
	}
	return nil
}

// manifestOf is a stored backup's manifest from its metadata (nil if
// it has none that decodes).
func manifestOf(info *jetstream.ObjectInfo) *capnv1.BackupManifest {
	m := &capnv1.BackupManifest{}
	if err := protojson.Unmarshal([]byte(info.Metadata[metaManifest]), m); err != nil {
		return nil
	}
	return m
}

// listBackups is GET /v1/backups (scope read): the stored backups, oldest
// first, and the scheduled backups' state.
func (s *server) listBackups(w http.ResponseWriter, r *http.Request) error {
	objects, err := s.objectStore(r.Context())
	if err != nil {
		return err
	}
	infos, err := objects.List(r.Context())
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return err
	}
	out := api.BackupList{Items: []api.BackupInfo{}}
	for _, info := range infos {
		if strings.HasPrefix(info.Name, uploadPrefix) {
			continue
		}
		b := api.BackupInfo{Name: info.Name, Bytes: info.Size}
		if m := manifestOf(info); m != nil {
			b.Created, b.Trigger, b.Clusters, b.Partial = m.GetCreated().AsTime(), m.GetTrigger(), m.GetClusters(), m.GetPartial()
			b.Entries, b.SHA256, b.CapnVersion, b.SealKeyIDs = m.GetEntries(), m.GetSha256(), m.GetCapnVersion(), m.GetSealKeyIds()
		}
		out.Items = append(out.Items, b)
	}
	slices.SortFunc(out.Items, func(a, b api.BackupInfo) int { return strings.Compare(a.Name, b.Name) })
	st, _, err := s.scheduleStatuses.Get(r.Context(), keys.BackupSchedule)
	switch {
	case err == nil:
		if out.Schedule, err = protojson.Marshal(st); err != nil {
			return err
		}
	case !errors.Is(err, store.ErrNotFound):
		zerolog.Ctx(r.Context()).Warn().Err(err).Msg("cannot read the scheduled backups' state")
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getBackup is GET /v1/backups/{name} (scope secrets): one stored
// backup's file.
func (s *server) getBackup(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if name == "" || strings.HasPrefix(name, uploadPrefix) || strings.ContainsAny(name, "/ \t") {
		return notFound("no backup %q", name)
	}
	objects, err := s.objectStore(r.Context())
	if err != nil {
		return err
	}
	return s.sendBackup(w, r, objects, name)
}

// restore is POST /v1/restores (scopes secrets and write): the body is a
// backup file. It is checked here first (a damaged file is a 422 naming
// what is wrong, and nothing is uploaded), uploaded to the object store,
// and restored by the backup service, whose report is the answer.
func (s *server) restore(w http.ResponseWriter, r *http.Request) error {
	if err := backupMediaTypes.check(r); err != nil {
		return err
	}
	q := r.URL.Query()
	dryRun, err := dryRunFrom(r)
	if err != nil {
		return err
	}
	req := &capnv1.RestoreBackup{DryRun: dryRun, KeyIds: s.keyIDs, RequestedBy: principalFrom(r.Context()).name}
	switch v := q.Get(api.ParamMerge); v {
	case "", "false":
	case "true":
		req.Merge = true
	default:
		return badRequest("%s %q is not valid", api.ParamMerge, v).withField(api.ParamMerge, `must be "true" or "false"`, v)
	}
	for c := range strings.SplitSeq(q.Get(api.ParamClusters), ",") {
		if c = strings.TrimSpace(c); c != "" {
			if err := checkName(api.ParamClusters, c); err != nil {
				return err
			}
			req.Clusters = append(req.Clusters, c)
		}
	}
	wait := 30 * time.Second
	if v := q.Get(api.ParamAdoptWait); v != "" {
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 || wait > 10*time.Minute {
			return badRequest("%s %q is not valid", api.ParamAdoptWait, v).withField(api.ParamAdoptWait, "must be a duration from 0s to 10m (e.g. 30s)", v)
		}
	}
	req.AdoptWait = durationpb.New(wait)
	data, err := readBody(r)
	if err != nil {
		return err
	}
	f, err := backupfile.Decode(data)
	if err == nil {
		err = f.Check()
	}
	if err != nil {
		var inv *backupfile.InvalidError
		if errors.As(err, &inv) {
			return backupProblem(&capnv1.BackupError{Code: "invalid", Message: "the file is not a valid backup: nothing was written", Details: inv.Problems})
		}
		return err
	}
	objects, err := s.objectStore(r.Context())
	if err != nil {
		return err
	}
	req.Object = uploadPrefix + uuid.NewString()
	if _, err := objects.PutBytes(r.Context(), req.Object, data); err != nil {
		return fmt.Errorf("upload %s: %w", req.Object, err)
	}
	defer func() {
		if err := objects.Delete(context.WithoutCancel(r.Context()), req.Object); err != nil {
			zerolog.Ctx(r.Context()).Warn().Err(err).Str("object", req.Object).Msg("cannot delete an uploaded backup")
		}
	}()
	// A restore waits for adoptions: let the answer take that long.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(wait + backupTimeout))
	report := &capnv1.RestoreReport{}
	if err := s.askBackup(r.Context(), "restore", req, report, wait+backupTimeout); err != nil {
		return err
	}
	if report.GetError() != nil {
		return backupProblem(report.GetError())
	}
	out, err := protojson.Marshal(report)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", api.MediaJSON)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
	return nil
}
