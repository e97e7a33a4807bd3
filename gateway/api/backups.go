package api

import (
	"encoding/json"
	"time"
)

// Backups and restores of the management plane (docs/operations.md).
//
//	POST /v1/backups             secrets  a backup, answered as the file (application/vnd.capn.backup)
//	GET  /v1/backups             read     the stored backups and the schedule's state
//	GET  /v1/backups/{name}      secrets  one stored backup's file
//	POST /v1/restores            secrets+write  restore a file (the body)
const (
	// MediaBackup is a backup file (schemas/backupfile).
	MediaBackup = "application/vnd.capn.backup"
	// HeaderBackupName and HeaderBackupSHA256 name a backup file answer's
	// backup and the SHA-256 of its entries (as its manifest says).
	HeaderBackupName   = "Capn-Backup-Name"
	HeaderBackupSHA256 = "Capn-Backup-Sha256"
)

// Query parameters of POST /v1/restores (with dryRun).
const (
	// ParamMerge=true restores into a deployment that has state: the
	// clusters it does not have; a cluster it has is a conflict, left
	// alone.
	ParamMerge = "merge"
	// ParamClusters restores only these clusters (comma-separated).
	ParamClusters = "clusters"
	// ParamAdoptWait bounds how long the restore waits for providers to
	// adopt the machines before it answers (a Go duration; default 30s).
	ParamAdoptWait = "adoptWait"
)

// BackupRequest is the body of POST /v1/backups; no body backs up
// everything.
type BackupRequest struct {
	// Clusters backs up only these clusters (each must exist).
	Clusters []string `json:"clusters,omitempty"`
	// Trigger is api (the default) or move (capn move's export).
	Trigger string `json:"trigger,omitempty"`
}

// BackupInfo is one stored backup, from its manifest.
type BackupInfo struct {
	Name        string    `json:"name"`
	Created     time.Time `json:"created"`
	Trigger     string    `json:"trigger"`
	Clusters    []string  `json:"clusters"`
	Partial     bool      `json:"partial,omitempty"`
	Entries     uint64    `json:"entries"`
	Bytes       uint64    `json:"bytes"`
	SHA256      string    `json:"sha256"`
	CapnVersion string    `json:"capnVersion"`
	SealKeyIDs  []string  `json:"sealKeyIds,omitempty"`
}

// BackupList answers GET /v1/backups: the stored backups, oldest first,
// and the scheduled backups' state (observed backup.schedule, as JSON;
// absent when none were ever scheduled).
type BackupList struct {
	Items    []BackupInfo    `json:"items"`
	Schedule json.RawMessage `json:"schedule,omitempty"`
}

// BackupSchedule is GET /v1/backups' schedule, decoded.
type BackupSchedule struct {
	Every               string      `json:"every,omitempty"`
	Keep                int         `json:"keep,omitempty"`
	LastAttempt         *time.Time  `json:"lastAttempt,omitempty"`
	LastSuccess         *time.Time  `json:"lastSuccess,omitempty"`
	LastBackup          string      `json:"lastBackup,omitempty"`
	LastError           string      `json:"lastError,omitempty"`
	ConsecutiveFailures int         `json:"consecutiveFailures,omitempty"`
	Next                *time.Time  `json:"next,omitempty"`
	Conditions          []Condition `json:"conditions,omitempty"`
}

// Condition is a status condition as the API shows it.
type Condition struct {
	Type               string     `json:"type"`
	Status             string     `json:"status"`
	Reason             string     `json:"reason,omitempty"`
	Message            string     `json:"message,omitempty"`
	LastTransitionTime *time.Time `json:"lastTransitionTime,omitempty"`
}

// EtcdRestoreRequest is the body of POST /v1/clusters/{name}/etcd-restores.
type EtcdRestoreRequest struct {
	// Snapshot is the name of one of the cluster's snapshots.
	Snapshot string `json:"snapshot"`
}

// RotateCARequest is the body of POST /v1/clusters/{name}/rotate-ca (an
// empty body runs a new rotation to the end).
type RotateCARequest struct {
	// Until stops after this phase: TrustBoth, Reissue (empty or Done: run
	// to the end).
	Until string `json:"until,omitempty"`
	// Continue resumes a rotation that is held or stopped.
	Continue bool `json:"continue,omitempty"`
}
