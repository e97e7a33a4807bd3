// Package api holds the wire types of capn's gateway HTTP API: problems,
// lists, request bodies, watch and timeline events, ingest results, and the
// names (scopes, media types, event types) both sides agree on. The gateway
// and its Go client (gateway/client) share them; docs/api.md is the
// reference.
//
// Resources themselves (Cluster, Machine) are not redefined here: on the
// wire they are the protojson encoding of capn.v1alpha1 messages
// (lowerCamelCase names, 64-bit integers as strings, RFC 3339 timestamps),
// so every language with protobuf support reads them exactly.
//
// The package imports only the standard library.
package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Identities of the resources and their lists.
const (
	APIVersion      = "capn.dev/v1alpha1"
	KindCluster     = "Cluster"
	KindMachine     = "Machine"
	KindClusterList = "ClusterList"
	KindMachineList = "MachineList"
	// Add-ons: sets, their lists, and the per-cluster records of a
	// cluster (GET /v1/clusters/{name}/addons).
	KindAddonSet               = "AddonSet"
	KindAddonSetList           = "AddonSetList"
	KindClusterAddonStatusList = "ClusterAddonStatusList"
	// Fleet: cluster classes and rollouts.
	KindClusterClass     = "ClusterClass"
	KindClusterClassList = "ClusterClassList"
	KindRollout          = "Rollout"
	KindRolloutList      = "RolloutList"
	// ControlPlanePool names the control plane in a ScaleRequest.
	ControlPlanePool = "control-plane"
)

// Server-side dry run: ?dryRun=All on a write (apply, PUT, delete and the
// convenience actions) decodes, defaults and validates as the write would,
// against the stored cluster, writes nothing, and answers with the cluster
// as it would be stored.
const (
	ParamDryRun = "dryRun"
	DryRunAll   = "All"
)

// DELETE /v1/clusters/{name}?propagationPolicy=Orphan deletes the cluster
// from capn without touching it in the world (Kubernetes' parameter): its
// machines keep running and its providers only drop their records, for
// another capn deployment to adopt (capn move). Background (the default)
// tears it down.
const (
	ParamPropagationPolicy = "propagationPolicy"
	PropagationOrphan      = "Orphan"
	PropagationBackground  = "Background"
)

// Media types the API speaks.
const (
	MediaJSON        = "application/json"
	MediaYAML        = "application/yaml"
	MediaProblem     = "application/problem+json"
	MediaEventStream = "text/event-stream"
	MediaCloudEvent  = "application/cloudevents+json"
	MediaCloudBatch  = "application/cloudevents-batch+json"
)

// Scope is a permission a bearer token carries.
type Scope string

// The scopes. Admin stands for all four.
const (
	// ScopeRead: GET clusters, machines, events, watch.
	ScopeRead Scope = "read"
	// ScopeWrite: apply, delete (clusters, machines), scale, upgrade,
	// pause, resume, hibernate, wake, add and release lifecycle hooks.
	ScopeWrite Scope = "write"
	// ScopeIngest: POST /v1/events.
	ScopeIngest Scope = "ingest"
	// ScopeSecrets: GET /v1/clusters/{name}/kubeconfig; backups (POST and
	// GET /v1/backups/{name}: a backup holds the sealed secrets) and, with
	// write, restores (POST /v1/restores).
	ScopeSecrets Scope = "secrets"
	// ScopeAdmin is every scope.
	ScopeAdmin Scope = "admin"
)

// Scopes lists every scope a token file may name.
var Scopes = []Scope{ScopeRead, ScopeWrite, ScopeIngest, ScopeSecrets, ScopeAdmin}

// Problem is an RFC 9457 problem document (application/problem+json): every
// error the gateway returns is one. Errors lists each bad field or
// attribute with its path when there is one.
type Problem struct {
	// Type is a URI naming the kind of problem (one of the Problem*
	// constants); Title is its short human-readable summary.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	// Detail explains this occurrence.
	Detail string `json:"detail,omitempty"`
	// Instance is the request path the problem occurred on.
	Instance string           `json:"instance,omitempty"`
	Errors   []FieldViolation `json:"errors,omitempty"`
}

// FieldViolation is one bad field: for a manifest the path uses the
// manifest's names (spec.workerPools[0].replicas); for a CloudEvent it is
// the attribute (id, specversion, data.cluster), prefixed with the event's
// index in a batch ([2].source); for a request body, its field (replicas).
type FieldViolation struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
	// Value is the offending value, when there is one to show.
	Value string `json:"value,omitempty"`
}

// Error renders the problem on one line: "title: detail; path: reason".
func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.Title)
	if p.Detail != "" {
		b.WriteString(": ")
		b.WriteString(p.Detail)
	}
	for _, e := range p.Errors {
		b.WriteString("; ")
		b.WriteString(e.Path)
		b.WriteString(": ")
		if e.Value != "" {
			fmt.Fprintf(&b, "%q: ", e.Value)
		}
		b.WriteString(e.Reason)
	}
	return b.String()
}

// Problem types. Each is documented in docs/api.md.
const (
	ProblemInvalidManifest  = "urn:capn:problem:invalid-manifest"  // 400: not YAML/JSON, unknown fields, wrong types
	ProblemInvalidRequest   = "urn:capn:problem:invalid-request"   // 400: bad query, path or body of a convenience endpoint
	ProblemInvalidSpec      = "urn:capn:problem:invalid-spec"      // 422: decodes but breaks a rule
	ProblemInvalidEvent     = "urn:capn:problem:invalid-event"     // 400: a CloudEvent that is not valid
	ProblemUnauthorized     = "urn:capn:problem:unauthorized"      // 401
	ProblemForbidden        = "urn:capn:problem:forbidden"         // 403
	ProblemNotFound         = "urn:capn:problem:not-found"         // 404
	ProblemNotYetAvailable  = "urn:capn:problem:not-yet-available" // 404: e.g. a kubeconfig not made yet
	ProblemMethodNotAllowed = "urn:capn:problem:method-not-allowed"
	ProblemConflict         = "urn:capn:problem:conflict"  // 409: stale resourceVersion, uid, deleting
	ProblemTooLarge         = "urn:capn:problem:too-large" // 413
	ProblemUnsupportedMedia = "urn:capn:problem:unsupported-media-type"
	ProblemRateLimited      = "urn:capn:problem:rate-limited"    // 429
	ProblemRequestTimeout   = "urn:capn:problem:request-timeout" // 408: the body came too slowly
	ProblemMisdirected      = "urn:capn:problem:misdirected"     // 421: a Host the gateway does not serve
	ProblemUnavailable      = "urn:capn:problem:unavailable"     // 503: JetStream not answering; retry
	ProblemInternal         = "urn:capn:problem:internal"        // 500
	ProblemCorruptRecord    = "urn:capn:problem:corrupt-record"  // 500: the stored record does not decode
	ProblemInvalidBackup    = "urn:capn:problem:invalid-backup"  // 422: a file that is not a valid backup; errors say where
	ProblemNotEmpty         = "urn:capn:problem:not-empty"       // 409: a restore into a deployment with state, without merge
	ProblemSealKeys         = "urn:capn:problem:seal-keys"       // 409: a backup sealed with a key the deployment does not hold
)

// AddonSecretInfo is the answer to PUT /v1/addonsecrets/{name}: what was
// stored, without the content (the API never gives it back).
type AddonSecretInfo struct {
	Name string `json:"name"`
	// Hash is a digest of the content (sha256, 16 hex digits): a Reconcile
	// set naming the secret is applied again when it changes.
	Hash    string    `json:"hash"`
	Objects int       `json:"objects"`
	Updated time.Time `json:"updated"`
}

// BootstrapSecret is the body of PUT /v1/bootstrapsecrets/{name}: each key
// and its value (base64 in JSON). Files name a key with
// files[].secretRef {name, key}.
type BootstrapSecret struct {
	Data map[string][]byte `json:"data"`
}

// BootstrapSecretInfo is the answer to PUT /v1/bootstrapsecrets/{name}:
// what was stored, without the values (the API never gives them back).
type BootstrapSecretInfo struct {
	Name    string    `json:"name"`
	Keys    []string  `json:"keys"`
	Hash    string    `json:"hash"`
	Updated time.Time `json:"updated"`
}

// ExternalKubeconfigInfo is the answer to PUT and GET
// /v1/externalkubeconfigs/{name}: what the registered kubeconfig of an
// external cluster is, never its credentials. Auth is "token" or
// "client-certificate"; UsedBy are the clusters whose
// spec.controlPlane.external.kubeconfig names it.
type ExternalKubeconfigInfo struct {
	Name    string    `json:"name"`
	Server  string    `json:"server"`
	Auth    string    `json:"auth"`
	Hash    string    `json:"hash"`
	Updated time.Time `json:"updated"`
	UsedBy  []string  `json:"usedBy"`
}

// List is a Kubernetes-style list: {"apiVersion", "kind": "ClusterList" or
// "MachineList", "items": [...]}. Items are protojson Cluster or Machine
// objects with metadata, spec and status.
type List struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []json.RawMessage `json:"items"`
}

// ScaleRequest is the body of POST /v1/clusters/{name}/scale.
type ScaleRequest struct {
	// Pool is a worker pool's name, or "control-plane".
	Pool string `json:"pool"`
	// Replicas is required (0 is valid for a worker pool).
	Replicas *int32 `json:"replicas"`
	// ResourceVersion, when set, makes the change conditional on the
	// cluster not having changed since it was read (409 otherwise).
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// UpgradeRequest is the body of POST /v1/clusters/{name}/upgrade.
type UpgradeRequest struct {
	// Version is the new Kubernetes version of the control plane, e.g.
	// v1.35.0. Worker pools that ran the control plane's old version follow
	// it; pools pinned to another version keep theirs.
	Version string `json:"version"`
	// ControlPlaneOnly leaves every worker pool's version as it is.
	ControlPlaneOnly bool `json:"controlPlaneOnly,omitempty"`
	// RespectWindow records the upgrade as spec.maintenance.pendingVersion
	// instead: the maintenance service applies it in the cluster's next
	// maintenance window (at once when it has none).
	RespectWindow   bool   `json:"respectWindow,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// PauseRequest is the optional body of POST /v1/clusters/{name}/pause,
// /resume, /hibernate and /wake.
type PauseRequest struct {
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// Watch event types (the SSE event name and WatchEvent.Type).
const (
	WatchAdded    = "ADDED"
	WatchModified = "MODIFIED"
	WatchDeleted  = "DELETED"
	// WatchSynced follows the initial state (or the missed changes after a
	// resume): from here on every event is live.
	WatchSynced = "SYNCED"
	// WatchReset says the Last-Event-ID could not be resumed from: drop
	// what you hold; the current state follows as ADDED events.
	WatchReset = "RESET"
	// WatchBookmark only advances the id to resume from.
	WatchBookmark = "BOOKMARK"
)

// WatchEvent is the data of one SSE event of GET /v1/watch.
type WatchEvent struct {
	Type string `json:"type"`
	// Kind is Cluster or Machine for ADDED, MODIFIED and DELETED.
	Kind string `json:"kind,omitempty"`
	// Object is the protojson Cluster or Machine (spec and status merged);
	// for DELETED, its last state.
	Object json.RawMessage `json:"object,omitempty"`
}

// Timeline SSE event names of GET /v1/clusters/{name}/events?follow=true.
const (
	TimelineEventName = "TIMELINE"
	TimelineSynced    = "SYNCED"
)

// TimelineEvent is one fact of a cluster's life, read from the CAPN_EVENTS
// stream (subject capn.evt.<entity>.<what>.<cluster>.<object>).
type TimelineEvent struct {
	// Sequence is the stream sequence: the id to resume from (?since=).
	Sequence uint64    `json:"sequence"`
	Time     time.Time `json:"time"`
	// ID, Source and Type are the CloudEvent's attributes.
	ID     string `json:"id"`
	Source string `json:"source"`
	Type   string `json:"type"`
	// Entity and What come from the subject: machine, provisioned.
	Entity string `json:"entity"`
	What   string `json:"what"`
	// Cluster is the cluster; Object the machine, or "_" for the cluster.
	Cluster string `json:"cluster"`
	Object  string `json:"object"`
	// Phase, Reason and Message are copied from the data when it has them.
	Phase   string `json:"phase,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// DataSchema names the data's protobuf message; Data is it as protojson
	// (or as sent, when it is JSON of an unknown schema).
	DataSchema string          `json:"dataschema,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
}

// TimelineList is the body of GET /v1/clusters/{name}/events.
type TimelineList struct {
	Items []TimelineEvent `json:"items"`
	// Truncated is true when older events than the first item matched but
	// were left out (see the limit parameter).
	Truncated bool `json:"truncated,omitempty"`
}

// IngestResult is the body of a 202 from POST /v1/events.
type IngestResult struct {
	Accepted   int             `json:"accepted"`
	Duplicates int             `json:"duplicates"`
	Events     []IngestedEvent `json:"events"`
}

// IngestedEvent says where one event was stored.
type IngestedEvent struct {
	ID     string `json:"id"`
	Source string `json:"source"`
	Type   string `json:"type"`
	// Stream and Sequence locate the stored copy (CAPN_INGEST); a duplicate
	// has the sequence of the copy stored first.
	Stream    string `json:"stream"`
	Sequence  uint64 `json:"sequence"`
	Duplicate bool   `json:"duplicate,omitempty"`
	// RoutedTo is the subject a capn health event was also published on.
	RoutedTo string `json:"routedTo,omitempty"`
}
