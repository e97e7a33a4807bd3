// Package client is the Go client of capn's gateway API (docs/api.md), so
// that the capn CLI and other tools stay thin: typed methods that return
// capn.v1alpha1 objects, and errors that carry the gateway's problem
// details (see Error).
//
// A Client is safe for concurrent use. Every method takes ctx first; calls
// that are not streams get DefaultTimeout when ctx has no deadline.
// Streams (Watch, FollowEvents) run until ctx ends or their callback
// returns an error, reconnecting with Last-Event-ID when the connection
// drops.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// DefaultTimeout bounds a call (not a stream) whose ctx has no deadline.
const DefaultTimeout = 30 * time.Second

// Client talks to one gateway.
type Client struct {
	base  *url.URL
	token string
	hc    *http.Client
	ua    string
	warn  func(string)
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends token as the bearer token of every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient uses hc (its Timeout must be 0 for streams to last).
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.ua = ua } }

// WithWarnings calls warn with the text of every Warning header (code
// 299, as the Kubernetes API sends) of a successful answer: e.g. a list
// that left out a stored record that does not decode. kubectl prints them
// as "Warning: <text>" on stderr; so does capn.
func WithWarnings(warn func(text string)) Option { return func(c *Client) { c.warn = warn } }

// New returns a client of the gateway at server, e.g.
// "http://127.0.0.1:8080".
func New(server string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(server, "/"))
	if err != nil {
		return nil, fmt.Errorf("gateway address %q: %w", server, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("gateway address %q: must be http(s)://host:port", server)
	}
	c := &Client{base: u, hc: http.DefaultClient, ua: "capn-client"}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Error is a problem the gateway answered with: the status code, the RFC
// 9457 problem (with the bad fields' paths in Problem.Errors) and, for 429
// and 503, how long to wait before retrying.
type Error struct {
	StatusCode int
	Problem    api.Problem
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s", e.StatusCode, e.Problem.Error())
}

// StatusCode is the HTTP status of an *Error in err's chain, else 0.
func StatusCode(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

// IsNotFound reports a 404 (which includes a kubeconfig not yet made).
func IsNotFound(err error) bool { return StatusCode(err) == http.StatusNotFound }

// IsConflict reports a 409: a stale resourceVersion, or a cluster being
// deleted.
func IsConflict(err error) bool { return StatusCode(err) == http.StatusConflict }

// IsCorrupt reports a stored record that does not decode (a 500 of type
// corrupt-record): it exists, and DELETE removes it if it is a cluster.
func IsCorrupt(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Problem.Type == api.ProblemCorruptRecord
}

// IsInvalid reports a 400 or 422: the manifest or request was refused; the
// problem's Errors say which fields.
func IsInvalid(err error) bool {
	c := StatusCode(err)
	return c == http.StatusBadRequest || c == http.StatusUnprocessableEntity
}

var unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}

// WriteOption changes how a write (Apply, Delete) is made.
type WriteOption func(q url.Values)

// DryRun makes a write a server-side dry run (?dryRun=All): the gateway
// checks everything the write would, against the stored cluster, writes
// nothing, and answers with the cluster as it would be stored.
func DryRun(q url.Values) { q.Set(api.ParamDryRun, api.DryRunAll) }

// Orphan makes a cluster's delete use the Orphan policy
// (?propagationPolicy=Orphan): capn lets go of the cluster without
// touching its machines or infrastructure (capn move).
func Orphan(q url.Values) { q.Set(api.ParamPropagationPolicy, api.PropagationOrphan) }

func writeQuery(opts []WriteOption) url.Values {
	q := url.Values{}
	for _, o := range opts {
		o(q)
	}
	return q
}

// Apply creates or updates the cluster a manifest (YAML or JSON) declares.
// It returns the stored cluster (with its resourceVersion and status) and
// whether it was created (with DryRun: as it would be stored, and whether
// it would be created).
func (c *Client) Apply(ctx context.Context, manifest []byte, opts ...WriteOption) (*capnv1.Cluster, bool, error) {
	ct := api.MediaYAML
	if t := bytes.TrimSpace(manifest); len(t) > 0 && t[0] == '{' {
		ct = api.MediaJSON
	}
	out := new(capnv1.Cluster)
	status, err := c.call(ctx, http.MethodPost, "/v1/clusters", writeQuery(opts), bytes.NewReader(manifest), ct, out)
	return out, status == http.StatusCreated, err
}

// ApplyCluster is Apply with a Cluster value.
func (c *Client) ApplyCluster(ctx context.Context, cl *capnv1.Cluster, opts ...WriteOption) (*capnv1.Cluster, bool, error) {
	b, err := protojson.Marshal(cl)
	if err != nil {
		return nil, false, err
	}
	return c.Apply(ctx, b, opts...)
}

// Get returns a cluster with its status.
func (c *Client) Get(ctx context.Context, name string) (*capnv1.Cluster, error) {
	out := new(capnv1.Cluster)
	_, err := c.call(ctx, http.MethodGet, "/v1/clusters/"+url.PathEscape(name), nil, nil, "", out)
	return out, err
}

// ListOptions filter List and Machines.
type ListOptions struct {
	// LabelSelector is Kubernetes' syntax: "a=b,c!=d,e".
	LabelSelector string
}

// List returns the clusters (with their status) sorted by name.
func (c *Client) List(ctx context.Context, opts ListOptions) ([]*capnv1.Cluster, error) {
	return listOf[capnv1.Cluster](ctx, c, "/v1/clusters", opts)
}

// Delete requests a cluster's deletion (202): it returns the cluster with
// its deletion timestamp; the cluster is gone once Get says IsNotFound.
func (c *Client) Delete(ctx context.Context, name string, opts ...WriteOption) (*capnv1.Cluster, error) {
	out := new(capnv1.Cluster)
	_, err := c.call(ctx, http.MethodDelete, "/v1/clusters/"+url.PathEscape(name), writeQuery(opts), nil, "", out)
	return out, err
}

// Scale sets a worker pool's replicas, or the control plane's with pool
// api.ControlPlanePool.
func (c *Client) Scale(ctx context.Context, name, pool string, replicas int32) (*capnv1.Cluster, error) {
	return c.action(ctx, name, "scale", api.ScaleRequest{Pool: pool, Replicas: &replicas})
}

// Upgrade sets the control plane's Kubernetes version (and the version of
// the pools that followed it).
func (c *Client) Upgrade(ctx context.Context, name, version string) (*capnv1.Cluster, error) {
	return c.action(ctx, name, "upgrade", api.UpgradeRequest{Version: version})
}

// UpgradeInWindow records an upgrade for the cluster's next maintenance
// window (spec.maintenance.pendingVersion): capn upgrade --respect-window.
func (c *Client) UpgradeInWindow(ctx context.Context, name, version string) (*capnv1.Cluster, error) {
	return c.action(ctx, name, "upgrade", api.UpgradeRequest{Version: version, RespectWindow: true})
}

// Pause stops capn from acting on a cluster.
func (c *Client) Pause(ctx context.Context, name string) (*capnv1.Cluster, error) {
	return c.action(ctx, name, "pause", api.PauseRequest{})
}

// Resume undoes Pause.
func (c *Client) Resume(ctx context.Context, name string) (*capnv1.Cluster, error) {
	return c.action(ctx, name, "resume", api.PauseRequest{})
}

// Hibernate stops a cluster's machines (same machines, same disks) until
// Wake.
func (c *Client) Hibernate(ctx context.Context, name string) (*capnv1.Cluster, error) {
	return c.action(ctx, name, "hibernate", api.PauseRequest{})
}

// Wake starts a hibernated cluster's machines again.
func (c *Client) Wake(ctx context.Context, name string) (*capnv1.Cluster, error) {
	return c.action(ctx, name, "wake", api.PauseRequest{})
}

func (c *Client) action(ctx context.Context, name, verb string, req any) (*capnv1.Cluster, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	out := new(capnv1.Cluster)
	_, err = c.call(ctx, http.MethodPost, "/v1/clusters/"+url.PathEscape(name)+"/"+verb, nil, bytes.NewReader(b), api.MediaJSON, out)
	return out, err
}

// Machines returns a cluster's machines (desired spec and observed status)
// sorted by name.
func (c *Client) Machines(ctx context.Context, cluster string, opts ListOptions) ([]*capnv1.Machine, error) {
	return listOf[capnv1.Machine](ctx, c, "/v1/clusters/"+url.PathEscape(cluster)+"/machines", opts)
}

// Machine returns one machine of a cluster.
func (c *Client) Machine(ctx context.Context, cluster, name string) (*capnv1.Machine, error) {
	out := new(capnv1.Machine)
	_, err := c.call(ctx, http.MethodGet, "/v1/clusters/"+url.PathEscape(cluster)+"/machines/"+url.PathEscape(name), nil, nil, "", out)
	return out, err
}

// Kubeconfig returns a cluster's admin kubeconfig (YAML). It needs a token
// with the secrets scope; IsNotFound until the bootstrapper has made it.
func (c *Client) Kubeconfig(ctx context.Context, cluster string) ([]byte, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := c.send(ctx, http.MethodGet, "/v1/clusters/"+url.PathEscape(cluster)+"/kubeconfig", nil, nil, "", api.MediaYAML, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// EventsOptions select a cluster's timeline events.
type EventsOptions struct {
	// Since starts after this stream sequence (0: from the start).
	Since uint64
	// Limit keeps the latest Limit events (0: the gateway's default, 1000).
	Limit int
}

func (o EventsOptions) query() url.Values {
	q := url.Values{}
	if o.Since > 0 {
		q.Set("since", strconv.FormatUint(o.Since, 10))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	return q
}

// Events returns a cluster's timeline, oldest first.
func (c *Client) Events(ctx context.Context, cluster string, opts EventsOptions) ([]api.TimelineEvent, error) {
	var out api.TimelineList
	_, err := c.call(ctx, http.MethodGet, "/v1/clusters/"+url.PathEscape(cluster)+"/events", opts.query(), nil, "", &out)
	return out.Items, err
}

// Ingest sends CloudEvents to POST /v1/events in batch mode (all or
// nothing) and returns where JetStream stored them. A 503 may be retried
// as it is: the gateway de-duplicates by source and id.
func (c *Client) Ingest(ctx context.Context, events ...event.Event) (*api.IngestResult, error) {
	b, err := json.Marshal(events)
	if err != nil {
		return nil, err
	}
	var out api.IngestResult
	_, err = c.call(ctx, http.MethodPost, "/v1/events", nil, bytes.NewReader(b), api.MediaCloudBatch, &out)
	return &out, err
}

// listOf reads a Kubernetes-style list of M.
func listOf[M any, PM interface {
	*M
	proto.Message
}](ctx context.Context, c *Client, path string, opts ListOptions) ([]PM, error) {
	q := url.Values{}
	if opts.LabelSelector != "" {
		q.Set("labelSelector", opts.LabelSelector)
	}
	var l api.List
	if _, err := c.call(ctx, http.MethodGet, path, q, nil, "", &l); err != nil {
		return nil, err
	}
	out := make([]PM, 0, len(l.Items))
	for i, raw := range l.Items {
		v := PM(new(M))
		if err := unmarshal.Unmarshal(raw, v); err != nil {
			return nil, fmt.Errorf("%s: item %d: %w", l.Kind, i, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// call sends a request and decodes a 2xx JSON answer into out (protojson
// for a proto.Message). It returns the status code.
func (c *Client) call(ctx context.Context, method, path string, q url.Values, body io.Reader, ct string, out any) (int, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	resp, err := c.send(ctx, method, path, q, body, ct, api.MediaJSON, "")
	if err != nil {
		return StatusCode(err), err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	switch v := out.(type) {
	case nil:
	case proto.Message:
		err = unmarshal.Unmarshal(b, v)
	default:
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return resp.StatusCode, nil
}

// send does one request and returns a 2xx response (its body for the
// caller to close), or an *Error built from the problem answered.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body io.Reader, ct, accept, lastEventID string) (*http.Response, error) {
	u := *c.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Accept", accept+", "+api.MediaProblem)
	req.Header.Set("User-Agent", c.ua)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if c.warn != nil {
			for _, h := range resp.Header.Values("Warning") {
				c.warn(warningText(h))
			}
		}
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, errorFrom(resp)
}

// warningText is the text of a Warning header value (`299 - "text"`), or
// the value as it is when it is not of that form.
func warningText(h string) string {
	code, rest, ok := strings.Cut(h, " ")
	if !ok || len(code) != 3 {
		return h
	}
	_, quoted, ok := strings.Cut(rest, " ")
	if !ok {
		return h
	}
	if t, err := strconv.Unquote(quoted); err == nil {
		return t
	}
	return h
}

// errorFrom reads a non-2xx answer into an *Error.
func errorFrom(resp *http.Response) error {
	e := &Error{StatusCode: resp.StatusCode}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != api.MediaProblem || json.Unmarshal(b, &e.Problem) != nil {
		e.Problem = api.Problem{Title: http.StatusText(resp.StatusCode), Status: resp.StatusCode, Detail: strings.TrimSpace(string(b))}
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// ApplyAddonSet creates or updates the add-on set a manifest (YAML or JSON)
// declares, as Apply does a cluster: the stored set (with its records as
// status) and whether it was created.
func (c *Client) ApplyAddonSet(ctx context.Context, manifest []byte, opts ...WriteOption) (*capnv1.AddonSet, bool, error) {
	ct := api.MediaYAML
	if t := bytes.TrimSpace(manifest); len(t) > 0 && t[0] == '{' {
		ct = api.MediaJSON
	}
	out := new(capnv1.AddonSet)
	status, err := c.call(ctx, http.MethodPost, "/v1/addonsets", writeQuery(opts), bytes.NewReader(manifest), ct, out)
	return out, status == http.StatusCreated, err
}

// KubernetesVersions returns a Kubernetes version catalogue (auto-patch
// reads "default").
func (c *Client) KubernetesVersions(ctx context.Context, name string) (*capnv1.KubernetesVersions, error) {
	out := new(capnv1.KubernetesVersions)
	_, err := c.call(ctx, http.MethodGet, "/v1/kubernetesversions/"+url.PathEscape(name), nil, nil, "", out)
	return out, err
}

// PutKubernetesVersions creates or replaces a catalogue from a YAML or
// JSON manifest; created says it did not exist.
func (c *Client) PutKubernetesVersions(ctx context.Context, name string, manifest []byte, opts ...WriteOption) (*capnv1.KubernetesVersions, bool, error) {
	ct := api.MediaYAML
	if t := bytes.TrimSpace(manifest); len(t) > 0 && t[0] == '{' {
		ct = api.MediaJSON
	}
	out := new(capnv1.KubernetesVersions)
	status, err := c.call(ctx, http.MethodPut, "/v1/kubernetesversions/"+url.PathEscape(name), writeQuery(opts), bytes.NewReader(manifest), ct, out)
	return out, status == http.StatusCreated, err
}

// AddonSet returns an add-on set with its records on each cluster.
func (c *Client) AddonSet(ctx context.Context, name string) (*capnv1.AddonSet, error) {
	out := new(capnv1.AddonSet)
	_, err := c.call(ctx, http.MethodGet, "/v1/addonsets/"+url.PathEscape(name), nil, nil, "", out)
	return out, err
}

// AddonSets returns the add-on sets, sorted by name.
func (c *Client) AddonSets(ctx context.Context, opts ListOptions) ([]*capnv1.AddonSet, error) {
	return listOf[capnv1.AddonSet](ctx, c, "/v1/addonsets", opts)
}

// DeleteAddonSet deletes an add-on set (at once: the addon-manager then
// leaves or deletes its objects as the set said).
func (c *Client) DeleteAddonSet(ctx context.Context, name string, opts ...WriteOption) (*capnv1.AddonSet, error) {
	out := new(capnv1.AddonSet)
	_, err := c.call(ctx, http.MethodDelete, "/v1/addonsets/"+url.PathEscape(name), writeQuery(opts), nil, "", out)
	return out, err
}

// ControlPlane returns a cluster's control-plane record (its
// implementation's: endpoint, version, replicas, conditions); an error
// matching IsNotFound while there is none.
func (c *Client) ControlPlane(ctx context.Context, cluster string) (*capnv1.ControlPlaneRecord, error) {
	out := new(capnv1.ControlPlaneRecord)
	_, err := c.call(ctx, http.MethodGet, "/v1/clusters/"+url.PathEscape(cluster)+"/controlplane", nil, nil, "", out)
	return out, err
}

// ClusterAddons returns the records of every add-on set on a cluster.
func (c *Client) ClusterAddons(ctx context.Context, cluster string) ([]*capnv1.ClusterAddonStatus, error) {
	return listOf[capnv1.ClusterAddonStatus](ctx, c, "/v1/clusters/"+url.PathEscape(cluster)+"/addons", ListOptions{})
}

// SetAddonSecret seals content (Kubernetes objects in YAML or JSON) as the
// add-on secret name; created says it did not exist.
func (c *Client) SetAddonSecret(ctx context.Context, name string, content []byte) (api.AddonSecretInfo, bool, error) {
	var out api.AddonSecretInfo
	status, err := c.call(ctx, http.MethodPut, "/v1/addonsecrets/"+url.PathEscape(name), nil, bytes.NewReader(content), api.MediaYAML, &out)
	return out, status == http.StatusCreated, err
}

// DeleteAddonSecret deletes the add-on secret name.
func (c *Client) DeleteAddonSecret(ctx context.Context, name string) error {
	_, err := c.call(ctx, http.MethodDelete, "/v1/addonsecrets/"+url.PathEscape(name), nil, nil, "", nil)
	return err
}

// SetBootstrapSecret seals data (each key and its value) as the bootstrap
// secret name, replacing what it held; created says it did not exist.
func (c *Client) SetBootstrapSecret(ctx context.Context, name string, data map[string][]byte) (api.BootstrapSecretInfo, bool, error) {
	var out api.BootstrapSecretInfo
	body, err := json.Marshal(api.BootstrapSecret{Data: data})
	if err != nil {
		return out, false, err
	}
	status, err := c.call(ctx, http.MethodPut, "/v1/bootstrapsecrets/"+url.PathEscape(name), nil, bytes.NewReader(body), api.MediaJSON, &out)
	return out, status == http.StatusCreated, err
}

// DeleteBootstrapSecret deletes the bootstrap secret name.
func (c *Client) DeleteBootstrapSecret(ctx context.Context, name string) error {
	_, err := c.call(ctx, http.MethodDelete, "/v1/bootstrapsecrets/"+url.PathEscape(name), nil, nil, "", nil)
	return err
}

// SetExternalKubeconfig registers kubeconfig (YAML or JSON) as the
// external kubeconfig name, replacing what it held; created says it did
// not exist. The gateway refuses one capn cannot use, naming each field.
func (c *Client) SetExternalKubeconfig(ctx context.Context, name string, kubeconfig []byte) (api.ExternalKubeconfigInfo, bool, error) {
	var out api.ExternalKubeconfigInfo
	status, err := c.call(ctx, http.MethodPut, "/v1/externalkubeconfigs/"+url.PathEscape(name), nil, bytes.NewReader(kubeconfig), api.MediaYAML, &out)
	return out, status == http.StatusCreated, err
}

// ExternalKubeconfig is what the external kubeconfig name is, without its
// credentials.
func (c *Client) ExternalKubeconfig(ctx context.Context, name string) (api.ExternalKubeconfigInfo, error) {
	var out api.ExternalKubeconfigInfo
	_, err := c.call(ctx, http.MethodGet, "/v1/externalkubeconfigs/"+url.PathEscape(name), nil, nil, "", &out)
	return out, err
}

// DeleteExternalKubeconfig deletes the external kubeconfig name; refused
// while a cluster uses it.
func (c *Client) DeleteExternalKubeconfig(ctx context.Context, name string) error {
	_, err := c.call(ctx, http.MethodDelete, "/v1/externalkubeconfigs/"+url.PathEscape(name), nil, nil, "", nil)
	return err
}

// Backup asks for a backup (of clusters, else of everything; trigger "" is
// api) and returns its file: the caller reads and closes it. name is the
// backup's name. Backups take their time: without a deadline on ctx the
// call gets two minutes.
func (c *Client) Backup(ctx context.Context, clusters []string, trigger string) (body io.ReadCloser, name string, err error) {
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	}
	b, err := json.Marshal(api.BackupRequest{Clusters: clusters, Trigger: trigger})
	if err != nil {
		cancel()
		return nil, "", err
	}
	resp, err := c.send(ctx, http.MethodPost, "/v1/backups", nil, bytes.NewReader(b), api.MediaJSON, api.MediaBackup, "")
	if err != nil {
		cancel()
		return nil, "", err
	}
	return cancelOnClose{resp.Body, cancel}, resp.Header.Get(api.HeaderBackupName), nil
}

// cancelOnClose ends a call's context once its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// Backups lists the stored backups and the schedule's state.
func (c *Client) Backups(ctx context.Context) (*api.BackupList, error) {
	out := &api.BackupList{}
	_, err := c.call(ctx, http.MethodGet, "/v1/backups", nil, nil, "", out)
	return out, err
}

// DownloadBackup returns a stored backup's file; the caller closes it.
func (c *Client) DownloadBackup(ctx context.Context, name string) (io.ReadCloser, error) {
	resp, err := c.send(ctx, http.MethodGet, "/v1/backups/"+url.PathEscape(name), nil, nil, "", api.MediaBackup, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// RestoreOptions shape a restore.
type RestoreOptions struct {
	// Merge restores into a deployment that has state (the clusters it
	// does not have).
	Merge bool
	// DryRun checks and plans, writing nothing.
	DryRun bool
	// Clusters restores only these.
	Clusters []string
	// AdoptWait bounds the wait for providers to adopt (0: the gateway's
	// default, 30s).
	AdoptWait time.Duration
}

// Restore sends a backup file to be restored and returns the report. The
// call lasts the adopt wait plus two minutes when ctx has no deadline.
func (c *Client) Restore(ctx context.Context, file []byte, o RestoreOptions) (*capnv1.RestoreReport, error) {
	q := url.Values{}
	if o.Merge {
		q.Set(api.ParamMerge, "true")
	}
	if o.DryRun {
		DryRun(q)
	}
	if len(o.Clusters) > 0 {
		q.Set(api.ParamClusters, strings.Join(o.Clusters, ","))
	}
	wait := o.AdoptWait
	if wait > 0 {
		q.Set(api.ParamAdoptWait, wait.String())
	} else {
		wait = 30 * time.Second
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait+2*time.Minute)
		defer cancel()
	}
	out := &capnv1.RestoreReport{}
	_, err := c.call(ctx, http.MethodPost, "/v1/restores", q, bytes.NewReader(file), api.MediaBackup, out)
	return out, err
}

// EtcdSnapshot asks for a snapshot of cluster's etcd now (kube-local
// clusters); the answer describes the stored snapshot.
func (c *Client) EtcdSnapshot(ctx context.Context, cluster string) (*capnv1.EtcdSnapshotInfo, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 6*time.Minute)
		defer cancel()
	}
	out := &capnv1.EtcdSnapshotInfo{}
	_, err := c.call(ctx, http.MethodPost, "/v1/clusters/"+url.PathEscape(cluster)+"/etcd-snapshots", nil, nil, "", out)
	return out, err
}

// EtcdSnapshots lists cluster's etcd snapshots, oldest first, and its
// schedule's state.
func (c *Client) EtcdSnapshots(ctx context.Context, cluster string) (*capnv1.EtcdSnapshotList, error) {
	out := &capnv1.EtcdSnapshotList{}
	_, err := c.call(ctx, http.MethodGet, "/v1/clusters/"+url.PathEscape(cluster)+"/etcd-snapshots", nil, nil, "", out)
	return out, err
}

// EtcdRestore restores cluster's etcd on every control-plane member from
// snapshot; it answers once every member is healthy and every API server
// ready.
func (c *Client) EtcdRestore(ctx context.Context, cluster, snapshot string) (*capnv1.EtcdRestoreResult, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 16*time.Minute)
		defer cancel()
	}
	b, err := json.Marshal(api.EtcdRestoreRequest{Snapshot: snapshot})
	if err != nil {
		return nil, err
	}
	out := &capnv1.EtcdRestoreResult{}
	_, err = c.call(ctx, http.MethodPost, "/v1/clusters/"+url.PathEscape(cluster)+"/etcd-restores", nil, bytes.NewReader(b), api.MediaJSON, out)
	return out, err
}

// RotateCA rotates cluster's CA (POST /v1/clusters/{name}/rotate-ca): it
// answers once the rotation is done, held after until, or stopped.
func (c *Client) RotateCA(ctx context.Context, cluster, until string, cont bool) (*capnv1.CARotationStatus, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 31*time.Minute)
		defer cancel()
	}
	b, err := json.Marshal(api.RotateCARequest{Until: until, Continue: cont})
	if err != nil {
		return nil, err
	}
	out := &capnv1.CARotationStatus{}
	_, err = c.call(ctx, http.MethodPost, "/v1/clusters/"+url.PathEscape(cluster)+"/rotate-ca", nil, bytes.NewReader(b), api.MediaJSON, out)
	return out, err
}
