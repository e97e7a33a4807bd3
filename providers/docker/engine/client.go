// Package engine is a small client of the Docker Engine API (v1.41, Docker
// 20.10 and newer) over its unix socket, with net/http only: the few
// endpoints the docker provider needs (containers, networks, images,
// events, archives). Every call has a deadline — the caller's, or
// Client.Timeout — so a missing or stuck daemon gives an error, never a
// hang; the event stream alone lives as long as its context.
package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// APIVersion is the Engine API version every request names.
const APIVersion = "v1.41"

// DefaultSocket is where the Docker daemon listens by default.
const DefaultSocket = "/var/run/docker.sock"

// DefaultTimeout bounds one call whose context has no deadline.
const DefaultTimeout = 30 * time.Second

var (
	// ErrNotFound is a 404: no such container, network or image.
	ErrNotFound = errors.New("docker: not found")
	// ErrConflict is a 409: e.g. a container name already in use.
	ErrConflict = errors.New("docker: conflict")
	// ErrUnreachable means the daemon did not answer at all.
	ErrUnreachable = errors.New("docker: daemon unreachable")
)

// APIError is an error answer of the daemon.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("docker: %s (HTTP %d)", e.Message, e.Status) }

// Is matches ErrNotFound and ErrConflict by status.
func (e *APIError) Is(target error) bool {
	return (target == ErrNotFound && e.Status == http.StatusNotFound) ||
		(target == ErrConflict && e.Status == http.StatusConflict)
}

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	socket  string
	http    *http.Client
	Timeout time.Duration
}

// New returns a client of the daemon at host: "unix:///path", a socket
// path, or "" for DOCKER_HOST's default (/var/run/docker.sock). Only unix
// sockets are supported.
func New(host string) (*Client, error) {
	socket := strings.TrimPrefix(host, "unix://")
	if host == "" {
		socket = DefaultSocket
	}
	if strings.Contains(socket, "://") || !strings.HasPrefix(socket, "/") {
		return nil, fmt.Errorf("docker host %q: only a unix socket (unix:///path) is supported", host)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:    8,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{socket: socket, http: &http.Client{Transport: tr}, Timeout: DefaultTimeout}, nil
}

// Host is the daemon's address, for messages.
func (c *Client) Host() string { return "unix://" + c.socket }

// Close releases idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Ping checks that the daemon answers.
func (c *Client) Ping(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/_ping", nil, nil, nil)
}

// do sends a request with a JSON body (in, unless nil or an io.Reader)
// and decodes a JSON answer into out (unless nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	resp, err := c.send(ctx, method, path, query, in, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("docker: %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// send returns a successful (2xx or 304) response whose body the caller
// closes; the call's deadline covers reading the body too.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, in any, contentType string) (*http.Response, error) {
	cancel := func() {}
	if _, ok := ctx.Deadline(); !ok && c.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
	}
	resp, err := c.sendNoTimeout(ctx, method, path, query, in, contentType)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// sendNoTimeout is send for streams that live as long as ctx.
func (c *Client) sendNoTimeout(ctx context.Context, method, path string, query url.Values, in any, contentType string) (*http.Response, error) {
	var body io.Reader
	switch v := in.(type) {
	case nil:
	case io.Reader:
		body = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		body, contentType = bytes.NewReader(b), "application/json"
	}
	u := "http://docker/" + APIVersion + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %s %s at %s: %w", ErrUnreachable, method, path, c.Host(), ctx.Err())
		}
		return nil, fmt.Errorf("%w at %s (is dockerd running, and may this user use its socket?): %w", ErrUnreachable, c.Host(), err)
	}
	if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusNotModified {
		return resp, nil
	}
	defer resp.Body.Close()
	var msg struct {
		Message string `json:"message"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &msg) != nil || msg.Message == "" {
		msg.Message = strings.TrimSpace(string(b))
	}
	return nil, &APIError{Status: resp.StatusCode, Message: msg.Message}
}

type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// labelFilters is the filters query of label=value pairs (and kinds).
func labelFilters(labels map[string]string, extra map[string][]string) url.Values {
	f := map[string][]string{}
	for k, v := range labels {
		f["label"] = append(f["label"], k+"="+v)
	}
	for k, v := range extra {
		f[k] = append(f[k], v...)
	}
	q := url.Values{}
	if len(f) > 0 {
		b, _ := json.Marshal(f)
		q.Set("filters", string(b))
	}
	return q
}
