package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/capn-dev/capn/secrets/kubeconfig"
)

// ClusterCache keeps, per workload cluster, one API client made from the
// kubeconfig capn uses for the cluster (its admin kubeconfig, or for an
// external control plane the registered one: secrets/clusterkubeconfig) and one backoff for an API server that does
// not answer, as Cluster API's clustercache does for its controllers. A
// service makes one and every loop of it that talks to workload API
// servers asks it (the bootstrapper's join tokens, the health-watcher's
// Node reads). Its rules:
//
//   - Client reads the kubeconfig each call and keeps the client while its
//     revision holds; a new revision (a renewed admin certificate, a CA
//     rotation, a new endpoint) replaces the client.
//   - Failed backs the cluster off: BackoffBase doubled per consecutive
//     failure, at most BackoffMax, counted from Now. Answered ends it.
//     Wait says how long it still runs; Kick ends it for the next Wait.
//   - Invalidate (the cluster is deleted, or no longer talked to) closes
//     the client and forgets the backoff.
//
// A ClusterCache is safe for concurrent use. It starts no goroutine and
// never asks an API server itself: its callers' requests are the probes.
type ClusterCache struct {
	cfg      ClusterCacheConfig
	mu       sync.Mutex
	clusters map[string]*cachedCluster
}

// ClusterCacheConfig configures a ClusterCache.
type ClusterCacheConfig struct {
	// Kubeconfig reads a cluster's admin kubeconfig and its revision (the
	// sealed key's KV revision). Client returns its errors wrapped, so
	// errors.Is still finds the caller's sentinels (store.ErrNotFound).
	Kubeconfig func(ctx context.Context, cluster string) (kubeconfig []byte, revision uint64, err error)
	// Timeout bounds one request of a client (default DefaultTimeout).
	Timeout time.Duration
	// BackoffBase and BackoffMax space the attempts after failures
	// (defaults 2s and 2m).
	BackoffBase, BackoffMax time.Duration
	// Now is the backoff's clock (default time.Now).
	Now func() time.Time
}

// ClusterState is what the last attempt on a cluster's API server found.
type ClusterState string

// States of a cluster's API server.
const (
	StateAnswering   ClusterState = "answering"
	StateUnreachable ClusterState = "unreachable" // no connection, TLS, timeout, 5xx or 429
	StateRefused     ClusterState = "refused"     // answered and refused (401, 403, ...)
	StateKubeconfig  ClusterState = "kubeconfig"  // the admin kubeconfig did not load or parse
)

// ErrKubeconfig wraps every error of Client that comes from reading or
// parsing the admin kubeconfig, not from an API server.
var ErrKubeconfig = errors.New("admin kubeconfig")

// StateOf classifies a failed attempt.
func StateOf(err error) ClusterState {
	var se *StatusError
	switch {
	case errors.Is(err, ErrKubeconfig):
		return StateKubeconfig
	case errors.As(err, &se) && se.Code/100 != 5 && se.Code != http.StatusTooManyRequests:
		return StateRefused
	}
	return StateUnreachable
}

// Attempt is what Failed and Answered record about a cluster.
type Attempt struct {
	State ClusterState
	// Changed: State differs from the previous attempt's (the first
	// attempt's always does). Log on change, not on every attempt.
	Changed bool
	// RetryIn is the backoff's delay (0 after an answer).
	RetryIn time.Duration
	// Server is the API server of the cluster's current client ("" before
	// one was made).
	Server string
}

type cachedCluster struct {
	client   *Client
	revision uint64
	failures int
	retryAt  time.Time
	kicked   bool
	state    ClusterState
}

// NewClusterCache returns an empty cache.
func NewClusterCache(cfg ClusterCacheConfig) *ClusterCache {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.BackoffBase <= 0 {
		cfg.BackoffBase = 2 * time.Second
	}
	if cfg.BackoffMax < cfg.BackoffBase {
		cfg.BackoffMax = max(2*time.Minute, cfg.BackoffBase)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &ClusterCache{cfg: cfg, clusters: map[string]*cachedCluster{}}
}

// entry is cluster's, made on first use; c.mu is held.
func (c *ClusterCache) entry(cluster string) *cachedCluster {
	e := c.clusters[cluster]
	if e == nil {
		e = &cachedCluster{}
		c.clusters[cluster] = e
	}
	return e
}

// Client is cluster's API client for its current kubeconfig.
func (c *ClusterCache) Client(ctx context.Context, cluster string) (*Client, error) {
	data, rev, err := c.cfg.Kubeconfig(ctx, cluster)
	if err != nil {
		return nil, fmt.Errorf("%w of %s: %w", ErrKubeconfig, cluster, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(cluster)
	if e.client != nil && e.revision == rev {
		return e.client, nil
	}
	// The admin kubeconfigs capn renders and the ones users register for
	// external control planes (a bearer token or a client certificate)
	// both parse as external ones (secrets/clusterkubeconfig).
	kc, err := kubeconfig.ParseExternal(data)
	if err != nil {
		return nil, fmt.Errorf("%w of %s: %w", ErrKubeconfig, cluster, err)
	}
	client, err := NewKubeconfigClient(kc)
	if err != nil {
		return nil, fmt.Errorf("%w of %s: %w", ErrKubeconfig, cluster, err)
	}
	client.HTTP.Timeout = c.cfg.Timeout
	if e.client != nil {
		e.client.Close()
	}
	e.client, e.revision = client, rev
	return client, nil
}

// Wait is how long cluster's backoff still runs; a Kick since the last
// Wait ends it.
func (c *ClusterCache) Wait(cluster string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.clusters[cluster]
	if e == nil {
		return 0
	}
	if e.kicked {
		e.kicked = false
		return 0
	}
	now := c.cfg.Now()
	if e.failures == 0 || !now.Before(e.retryAt) {
		return 0
	}
	return e.retryAt.Sub(now)
}

// Kick ends cluster's backoff at its next Wait: something the attempt
// works from changed.
func (c *ClusterCache) Kick(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entry(cluster).kicked = true
}

// Failed records a failed attempt on cluster (err classified by StateOf)
// and backs it off.
func (c *ClusterCache) Failed(cluster string, err error) Attempt {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(cluster)
	e.failures++
	d := c.cfg.BackoffBase
	for i := 1; i < e.failures && d < c.cfg.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, c.cfg.BackoffMax)
	e.retryAt = c.cfg.Now().Add(d)
	a := e.record(StateOf(err))
	a.RetryIn = d
	return a
}

// Answered records that cluster's API server answered: its backoff ends.
func (c *ClusterCache) Answered(cluster string) Attempt {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entry(cluster)
	e.failures, e.retryAt = 0, time.Time{}
	return e.record(StateAnswering)
}

func (e *cachedCluster) record(s ClusterState) Attempt {
	a := Attempt{State: s, Changed: e.state != s}
	e.state = s
	if e.client != nil {
		a.Server = e.client.Server
	}
	return a
}

// Invalidate closes cluster's client and forgets its backoff.
func (c *ClusterCache) Invalidate(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.clusters[cluster]; e != nil && e.client != nil {
		e.client.Close()
	}
	delete(c.clusters, cluster)
}

// Close closes every client; the cache stays usable.
func (c *ClusterCache) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.clusters {
		if e.client != nil {
			e.client.Close()
		}
	}
}

// NewKubeconfigClient is a client of a parsed kubeconfig's user: its
// bearer token, or else its client certificate and key (Auth says which).
func NewKubeconfigClient(kc kubeconfig.External) (*Client, error) {
	if kc.Token != "" {
		return NewTokenClient(kc.Server, kc.CACertPEM, kc.Token)
	}
	return NewClient(kc.Server, kc.CACertPEM, kc.ClientCertPEM, kc.ClientKeyPEM)
}
