package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// etcd snapshots of workload clusters whose control plane capn runs
// (kube-local): the backup service's work (services/backup, etcd.go),
// asked over NATS (capn.backup.etcd-snapshot, etcd-list, etcd-restore).
// The gateway never holds a snapshot: they stay sealed in the backup
// service's object store, and no endpoint downloads one.
//
// Scopes: taking a snapshot is `secrets` (it copies every Secret of the
// cluster, as POST /v1/backups copies the secrets bucket); a restore is
// `secrets` and `write` (it rolls the cluster's whole state back, as POST
// /v1/restores); listing is `read` (names, sizes, revisions, members:
// nothing of the content).

// etcdSnapshotTimeout bounds a snapshot; a restore's answer waits for
// every member and API server to be back.
const (
	etcdSnapshotTimeout = 5 * time.Minute
	etcdRestoreTimeout  = 15 * time.Minute
)

// writeProtoJSON answers m as JSON.
func writeProtoJSON(w http.ResponseWriter, status int, m proto.Message) error {
	out, err := protojson.Marshal(m)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", api.MediaJSON)
	w.WriteHeader(status)
	_, _ = w.Write(out)
	return nil
}

// createEtcdSnapshot is POST /v1/clusters/{name}/etcd-snapshots (scope
// secrets): the backup service takes a snapshot now; the answer is its
// description.
func (s *server) createEtcdSnapshot(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := checkName("name", name); err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(etcdSnapshotTimeout + time.Minute))
	res := &capnv1.EtcdSnapshotResult{}
	req := &capnv1.EtcdSnapshotRequest{Cluster: name, RequestedBy: principalFrom(r.Context()).name}
	if err := s.askBackup(r.Context(), "etcd-snapshot", req, res, etcdSnapshotTimeout); err != nil {
		return err
	}
	if res.GetError() != nil {
		return etcdProblem(res.GetError())
	}
	return writeProtoJSON(w, http.StatusCreated, res.GetSnapshot())
}

// listEtcdSnapshots is GET /v1/clusters/{name}/etcd-snapshots (scope
// read): the cluster's snapshots, oldest first, and its schedule's state.
func (s *server) listEtcdSnapshots(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := checkName("name", name); err != nil {
		return err
	}
	res := &capnv1.EtcdSnapshotList{}
	if err := s.askBackup(r.Context(), "etcd-list", &capnv1.EtcdSnapshotListRequest{Cluster: name}, res, backupTimeout); err != nil {
		return err
	}
	if res.GetError() != nil {
		return etcdProblem(res.GetError())
	}
	return writeProtoJSON(w, http.StatusOK, res)
}

// restoreEtcd is POST /v1/clusters/{name}/etcd-restores (scopes secrets
// and write), body {"snapshot": "<name>"}: the backup service restores
// the cluster's etcd on every control-plane member from the snapshot and
// answers once every member is healthy and every API server ready.
func (s *server) restoreEtcd(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := checkName("name", name); err != nil {
		return err
	}
	if err := bodyMediaTypes.check(r); err != nil {
		return err
	}
	data, err := readBody(r)
	if err != nil {
		return err
	}
	var body api.EtcdRestoreRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return badRequest("the body is not an etcd restore request: %v", err)
	}
	if body.Snapshot == "" {
		return badRequest("snapshot is required").withField("snapshot", "must name one of the cluster's snapshots (GET /v1/clusters/"+name+"/etcd-snapshots)", "")
	}
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Now().Add(etcdRestoreTimeout + time.Minute))
	res := &capnv1.EtcdRestoreResult{}
	req := &capnv1.EtcdRestoreRequest{Cluster: name, Snapshot: body.Snapshot, RequestedBy: principalFrom(r.Context()).name}
	if err := s.askBackup(r.Context(), "etcd-restore", req, res, etcdRestoreTimeout); err != nil {
		return err
	}
	if res.GetError() != nil {
		return etcdProblem(res.GetError())
	}
	return writeProtoJSON(w, http.StatusOK, res)
}

// etcdProblem is the problem of a refused etcd request.
func etcdProblem(e *capnv1.BackupError) error {
	switch e.GetCode() {
	case "invalid":
		return problem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid etcd request", "%s", e.GetMessage())
	case "unavailable":
		return unavailable("%s", e.GetMessage())
	}
	return backupProblem(e)
}
