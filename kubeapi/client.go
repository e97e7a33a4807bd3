// Package kubeapi is a small client of the Kubernetes API with net/http and
// encoding/json — no client-go. It knows just enough of the REST
// conventions for capn's own objects: GET, create, merge-patch, delete and
// create-or-update of whole objects, authenticated with a client
// certificate or a bearer (bootstrap) token; and server-side apply of any
// object, its REST path found through the API's discovery (apply.go).
//
// The node side (cmd/capn-node/kube) registers a control plane's join
// material and Nodes with it. Services reach workload clusters through a
// ClusterCache (one client per cluster, one backoff): the bootstrapper
// registers every joining machine's bootstrap-token Secret, the
// health-watcher reads and deletes Nodes, the addon-manager applies
// add-ons.
package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultTimeout bounds one request of a client made by NewClient or
// NewTokenClient (connect, TLS handshake, answer).
const DefaultTimeout = 15 * time.Second

// Client talks to an API server as one user.
type Client struct {
	Server string
	HTTP   *http.Client
	// Token, when set, is sent as a bearer token (a bootstrap token).
	Token string

	disc atomic.Pointer[discovery] // what ResourceFor read (apply.go)
}

// NewClient trusts caPEM for server and authenticates with the client
// certificate certPEM and its key keyPEM.
func NewClient(server string, caPEM, certPEM, keyPEM []byte) (*Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("kubeconfig: no CA certificate")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig client certificate: %w", err)
	}
	st := &swapTransport{}
	st.cur.Store(certTransport(pool, cert))
	return &Client{Server: strings.TrimSuffix(server, "/"), HTTP: &http.Client{Transport: st, Timeout: DefaultTimeout}}, nil
}

func certTransport(pool *x509.CertPool, cert tls.Certificate) *http.Transport {
	return &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
}

// swapTransport is a client certificate's transport that Reload replaces
// while requests run (a cluster CA rotation changes both the CA and the
// certificate under a running node agent).
type swapTransport struct {
	cur atomic.Pointer[http.Transport]
}

func (s *swapTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return s.cur.Load().RoundTrip(r)
}

func (s *swapTransport) CloseIdleConnections() { s.cur.Load().CloseIdleConnections() }

// Reload makes a client of NewClient trust caPEM and authenticate with
// certPEM/keyPEM from its next connection on; requests in flight finish
// on the old connections, which are then closed.
func (c *Client) Reload(caPEM, certPEM, keyPEM []byte) error {
	st, ok := c.HTTP.Transport.(*swapTransport)
	if !ok {
		return errors.New("reload: not a client-certificate client (NewClient)")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("reload: no CA certificate")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("reload: client certificate: %w", err)
	}
	old := st.cur.Swap(certTransport(pool, cert))
	old.CloseIdleConnections()
	return nil
}

// NewTokenClient trusts caPEM for server and authenticates with a bearer
// token: how a joining node asks for its certificate.
func NewTokenClient(server string, caPEM []byte, token string) (*Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, IdleConnTimeout: 30 * time.Second}
	return &Client{Server: strings.TrimSuffix(server, "/"), HTTP: &http.Client{Transport: tr, Timeout: DefaultTimeout}, Token: token}, nil
}

// Close drops idle connections.
func (c *Client) Close() { c.HTTP.CloseIdleConnections() }

// StatusError is an API answer other than 2xx.
type StatusError struct {
	Method, Path string
	Code         int
	// Reason and Message of the API's Status, when it sent one.
	Reason, Message string
	// Causes are the Status's details.causes.
	Causes []StatusCause
}

// StatusCause is one of a Status's details.causes.
type StatusCause struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

// Cause is the message of the first cause with reason ("" if none).
func (e *StatusError) Cause(reason string) string {
	for _, c := range e.Causes {
		if c.Reason == reason {
			return c.Message
		}
	}
	return ""
}

func (e *StatusError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Code, msg)
}

// IsStatus is true when err is a StatusError with code.
func IsStatus(err error, code int) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Code == code
}

// Do sends body (JSON-encoded unless it is []byte) with contentType and
// decodes a 2xx answer into out (when not nil).
func (c *Client) Do(ctx context.Context, method, path, contentType string, body, out any) error {
	_, err := c.do(ctx, method, path, contentType, body, out)
	return err
}

// do is Do that also returns the answer's status code (0 when there was
// none).
func (c *Client) do(ctx context.Context, method, path, contentType string, body, out any) (int, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("%s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Server+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		se := &StatusError{Method: method, Path: path, Code: resp.StatusCode}
		var st struct {
			Reason, Message string
			Details         struct {
				Causes []StatusCause `json:"causes"`
			} `json:"details"`
		}
		if json.Unmarshal(data, &st) == nil {
			se.Reason, se.Message, se.Causes = st.Reason, st.Message, st.Details.Causes
		} else {
			se.Message = strings.TrimSpace(string(data))
		}
		return resp.StatusCode, se
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// Get decodes the object (or list) at path into out.
func (c *Client) Get(ctx context.Context, path string, out any) error {
	return c.Do(ctx, http.MethodGet, path, "", nil, out)
}

// Delete deletes the object at path; one that is already gone is not an
// error (gone is false then).
func (c *Client) Delete(ctx context.Context, path string) (gone bool, err error) {
	err = c.Do(ctx, http.MethodDelete, path, "", nil, nil)
	if IsStatus(err, http.StatusNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Ready is nil when GET /readyz answers 200.
func (c *Client) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Server+"/readyz", nil)
	if err != nil {
		return err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %d %s", resp.StatusCode, firstFailed(string(body)))
	}
	return nil
}

// firstFailed picks the failing checks out of a /readyz answer.
func firstFailed(body string) string {
	var failed []string
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, "[-]") {
			failed = append(failed, strings.TrimPrefix(strings.Fields(line)[0], "[-]"))
		}
	}
	if len(failed) == 0 {
		return strings.TrimSpace(body)
	}
	return "failing: " + strings.Join(failed, ", ")
}

// Version is the API server's gitVersion (GET /version).
func (c *Client) Version(ctx context.Context) (string, error) {
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := c.Get(ctx, "/version", &v); err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// Object is a Kubernetes object capn writes: where its collection is, its
// name, and the object itself.
type Object struct {
	// Collection is the REST path of the object's collection, e.g.
	// /apis/rbac.authorization.k8s.io/v1/clusterrolebindings.
	Collection string
	Name       string
	Body       map[string]any
}

// Path is the object's own REST path.
func (o Object) Path() string { return o.Collection + "/" + o.Name }

// String is kind/namespace/name, for logs and errors.
func (o Object) String() string {
	kind, _ := o.Body["kind"].(string)
	return kind + " " + strings.TrimPrefix(o.Path(), "/api/v1/")
}

// Apply creates o, or replaces an existing one with o's content (keeping
// the server's resourceVersion), as kubeadm's apiclient.CreateOrUpdate.
// It retries on a conflict.
func (c *Client) Apply(ctx context.Context, o Object) error {
	err := c.Do(ctx, http.MethodPost, o.Collection, "application/json", o.Body, nil)
	if err == nil || !IsStatus(err, http.StatusConflict) {
		return wrap(o, err)
	}
	for range 5 {
		var cur struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := c.Get(ctx, o.Path(), &cur); err != nil {
			return wrap(o, err)
		}
		body := cloneWithResourceVersion(o.Body, cur.Metadata.ResourceVersion)
		err = c.Do(ctx, http.MethodPut, o.Path(), "application/json", body, nil)
		if !IsStatus(err, http.StatusConflict) {
			return wrap(o, err)
		}
	}
	return wrap(o, err)
}

// Create creates o and leaves an existing one as it is (created is false
// then).
func (c *Client) Create(ctx context.Context, o Object) (created bool, err error) {
	err = c.Do(ctx, http.MethodPost, o.Collection, "application/json", o.Body, nil)
	if IsStatus(err, http.StatusConflict) {
		return false, nil
	}
	return err == nil, wrap(o, err)
}

// MergePatch applies a JSON merge patch to path.
func (c *Client) MergePatch(ctx context.Context, path string, patch any) error {
	return c.Do(ctx, http.MethodPatch, path, "application/merge-patch+json", patch, nil)
}

func wrap(o Object, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("apply %s: %w", o, err)
}

func cloneWithResourceVersion(body map[string]any, rv string) map[string]any {
	out := make(map[string]any, len(body))
	for k, v := range body {
		out[k] = v
	}
	meta := map[string]any{}
	if m, ok := body["metadata"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
	}
	meta["resourceVersion"] = rv
	out["metadata"] = meta
	return out
}
