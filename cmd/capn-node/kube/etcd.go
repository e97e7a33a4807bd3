package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capn-dev/capn/kubeapi"
)

// Etcd membership. A control-plane machine other than the first joins the
// cluster's etcd as kubeadm's join does, but as a learner first (etcd's
// safe way to add a member: a learner does not count toward quorum until
// it has caught up and is promoted). Membership is read and changed
// through the JSON gateway every etcd serves on its client URLs
// (POST /v3/cluster/member/...), with a client certificate of the etcd CA.

// EtcdClientURLsAnnotation is set on a control-plane Node: the client URLs
// of the machine's etcd member, as kubeadm's
// kubeadm.kubernetes.io/etcd.advertise-client-urls on the etcd Pod. A
// joining machine finds the members to ask through it.
const EtcdClientURLsAnnotation = "kube-local.capn.dev/etcd.advertise-client-urls"

// Member is one etcd member as the member API describes it. Name is empty
// while an added member has not started.
type Member struct {
	ID         EtcdID   `json:"ID"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
	IsLearner  bool     `json:"isLearner"`
}

// Started is true once the member has run and published its name.
func (m Member) Started() bool { return m.Name != "" }

// EtcdID is a member ID: the gateway writes uint64 as a JSON string.
type EtcdID uint64

// MarshalJSON writes the ID as the gateway reads it (a decimal string).
func (id EtcdID) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatUint(uint64(id), 10) + `"`), nil
}

// UnmarshalJSON reads a quoted or bare decimal.
func (id *EtcdID) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseUint(strings.Trim(string(b), `"`), 10, 64)
	if err != nil {
		return fmt.Errorf("etcd member ID %s: %w", b, err)
	}
	*id = EtcdID(v)
	return nil
}

// String is the ID in hex, as etcdctl prints it.
func (id EtcdID) String() string { return strconv.FormatUint(uint64(id), 16) }

// Etcd asks the members at its endpoints (the first that answers).
type Etcd struct {
	clients          []*kubeapi.Client
	caPEM, cert, key []byte
}

// NewEtcd trusts the etcd CA caPEM and authenticates with a client
// certificate it signed.
func NewEtcd(endpoints []string, caPEM, certPEM, keyPEM []byte) (*Etcd, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("etcd: no endpoint to ask")
	}
	e := &Etcd{caPEM: caPEM, cert: certPEM, key: keyPEM}
	for _, u := range endpoints {
		c, err := kubeapi.NewClient(u, caPEM, certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("etcd client for %s: %w", u, err)
		}
		e.clients = append(e.clients, c)
	}
	return e, nil
}

// NewEtcdFromPKI is NewEtcd with the etcd CA and the API server's etcd
// client certificate under the machine's PKI dir.
func NewEtcdFromPKI(l Layout, endpoints []string) (*Etcd, error) {
	read := func(name string) []byte {
		b, _ := os.ReadFile(filepath.Join(l.PKIDir(), filepath.FromSlash(name)))
		return b
	}
	return NewEtcd(endpoints, read("etcd/ca.crt"), read("apiserver-etcd-client.crt"), read("apiserver-etcd-client.key"))
}

// Close drops idle connections.
func (e *Etcd) Close() {
	for _, c := range e.clients {
		c.Close()
	}
}

// call posts req to path at the first endpoint that answers; an answer
// that is an error of etcd itself is returned without asking the others.
func (e *Etcd) call(ctx context.Context, path string, req, out any) error {
	var errs []error
	for _, c := range e.clients {
		err := c.Do(ctx, http.MethodPost, path, "application/json", req, out)
		var se *kubeapi.StatusError
		if err == nil || errors.As(err, &se) && se.Code < 500 || ctx.Err() != nil {
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", c.Server, err))
	}
	return fmt.Errorf("etcd: no member answered: %w", errors.Join(errs...))
}

type membersResponse struct {
	Member  *Member  `json:"member"`
	Members []Member `json:"members"`
}

// Members lists the members (linearizable: never a stale list).
func (e *Etcd) Members(ctx context.Context) ([]Member, error) {
	var out membersResponse
	if err := e.call(ctx, "/v3/cluster/member/list", map[string]any{"linearizable": true}, &out); err != nil {
		return nil, err
	}
	return out.Members, nil
}

// AddLearner adds a learner with peerURL and returns it and the members
// after the change.
func (e *Etcd) AddLearner(ctx context.Context, peerURL string) (Member, []Member, error) {
	var out membersResponse
	if err := e.call(ctx, "/v3/cluster/member/add", map[string]any{"peerURLs": []string{peerURL}, "isLearner": true}, &out); err != nil {
		return Member{}, nil, err
	}
	if out.Member == nil {
		return Member{}, nil, errors.New("etcd: member add answered without the member")
	}
	return *out.Member, out.Members, nil
}

// Remove removes a member; one that is already gone is not an error.
func (e *Etcd) Remove(ctx context.Context, id EtcdID) error {
	err := e.call(ctx, "/v3/cluster/member/remove", map[string]any{"ID": id}, nil)
	if err != nil && strings.Contains(err.Error(), "member not found") {
		return nil
	}
	return err
}

// Promote makes a learner a voting member. etcd refuses while the learner
// has not caught up with the leader ("can only promote a learner member
// which is in sync with leader"); the caller retries.
func (e *Etcd) Promote(ctx context.Context, id EtcdID) error {
	return e.call(ctx, "/v3/cluster/member/promote", map[string]any{"ID": id}, nil)
}

// At is a client of the members at endpoints with e's credentials.
func (e *Etcd) At(endpoints []string) (*Etcd, error) {
	return NewEtcd(endpoints, e.caPEM, e.cert, e.key)
}

// HealthTimeout bounds one member's health check.
var HealthTimeout = 3 * time.Second

// MemberHealth asks one member at its client URLs for GET /health, etcd's
// own check (a leader, no alarm, a read that commits): nil when healthy.
// A member that has not started (no client URL) is not healthy.
func (e *Etcd) MemberHealth(ctx context.Context, m Member) error {
	if len(m.ClientURLs) == 0 {
		return errors.New("no client URL: not started")
	}
	at, err := e.At(m.ClientURLs)
	if err != nil {
		return err
	}
	defer at.Close()
	ctx, cancel := context.WithTimeout(ctx, HealthTimeout)
	defer cancel()
	var errs []error
	for _, c := range at.clients {
		var out struct {
			Health string `json:"health"`
			Reason string `json:"reason"`
		}
		err := c.Get(ctx, "/health", &out)
		if err == nil && out.Health != "true" {
			err = fmt.Errorf("health %q %s", out.Health, out.Reason)
		}
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// MembersHealth asks every member but the learners (which serve no
// linearizable read) for its health, all at once.
func (e *Etcd) MembersHealth(ctx context.Context, members []Member) Health {
	h := Health{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, m := range members {
		if m.IsLearner {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := e.MemberHealth(ctx, m)
			mu.Lock()
			h[m.ID] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	return h
}

// Leader is the ID of the leader as the members at e's endpoints know it.
func (e *Etcd) Leader(ctx context.Context) (EtcdID, error) {
	var out struct {
		Leader EtcdID `json:"leader"`
	}
	if err := e.call(ctx, "/v3/maintenance/status", map[string]any{}, &out); err != nil {
		return 0, err
	}
	if out.Leader == 0 {
		return 0, errors.New("etcd: the member knows no leader")
	}
	return out.Leader, nil
}

// MoveLeader asks the leader, which must be at e's endpoints, to hand
// leadership to the voting member target (etcdctl move-leader; Cluster
// API's control plane does it before removing the leader's machine).
func (e *Etcd) MoveLeader(ctx context.Context, target EtcdID) error {
	return e.call(ctx, "/v3/maintenance/transfer-leadership", map[string]any{"targetID": target}, nil)
}

// InitialCluster is etcd's --initial-cluster for a member joining
// members: name=peerURL for every member, the joining one (which has no
// name yet) under self — as etcdctl member add prints it.
func InitialCluster(members []Member, self EtcdID, name string) string {
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == self {
			n = name
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// ByPeerURL is the member with peerURL.
func ByPeerURL(members []Member, peerURL string) (Member, bool) {
	i := slices.IndexFunc(members, func(m Member) bool { return slices.Contains(m.PeerURLs, peerURL) })
	if i < 0 {
		return Member{}, false
	}
	return members[i], true
}
