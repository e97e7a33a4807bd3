package client

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func contentType(manifest []byte) string {
	if t := bytes.TrimSpace(manifest); len(t) > 0 && t[0] == '{' {
		return api.MediaJSON
	}
	return api.MediaYAML
}

// ApplyClass creates or updates the cluster class a manifest declares: the
// stored class (its status.revision is new when the spec changed) and
// whether it was created.
func (c *Client) ApplyClass(ctx context.Context, manifest []byte, opts ...WriteOption) (*capnv1.ClusterClass, bool, error) {
	out := new(capnv1.ClusterClass)
	status, err := c.call(ctx, http.MethodPost, "/v1/clusterclasses", writeQuery(opts), bytes.NewReader(manifest), contentType(manifest), out)
	return out, status == http.StatusCreated, err
}

// Class returns a cluster class at its current revision (revision 0) or
// at the revision given.
func (c *Client) Class(ctx context.Context, name string, revision int64) (*capnv1.ClusterClass, error) {
	var q url.Values
	if revision > 0 {
		q = url.Values{"revision": {strconv.FormatInt(revision, 10)}}
	}
	out := new(capnv1.ClusterClass)
	_, err := c.call(ctx, http.MethodGet, "/v1/clusterclasses/"+url.PathEscape(name), q, nil, "", out)
	return out, err
}

// Classes returns every cluster class.
func (c *Client) Classes(ctx context.Context) ([]*capnv1.ClusterClass, error) {
	return listOf[capnv1.ClusterClass](ctx, c, "/v1/clusterclasses", ListOptions{})
}

// CreateRollout creates the rollout a manifest declares.
func (c *Client) CreateRollout(ctx context.Context, manifest []byte) (*capnv1.Rollout, error) {
	out := new(capnv1.Rollout)
	_, err := c.call(ctx, http.MethodPost, "/v1/rollouts", nil, bytes.NewReader(manifest), contentType(manifest), out)
	return out, err
}

// Rollout returns a rollout with its status (the fleet-manager's).
func (c *Client) Rollout(ctx context.Context, name string) (*capnv1.Rollout, error) {
	out := new(capnv1.Rollout)
	_, err := c.call(ctx, http.MethodGet, "/v1/rollouts/"+url.PathEscape(name), nil, nil, "", out)
	return out, err
}

// Rollouts returns every rollout.
func (c *Client) Rollouts(ctx context.Context) ([]*capnv1.Rollout, error) {
	return listOf[capnv1.Rollout](ctx, c, "/v1/rollouts", ListOptions{})
}

// Rollout actions.
const (
	RolloutPause  = "pause"
	RolloutResume = "resume"
	RolloutAbort  = "abort"
)

// RolloutAction pauses, resumes (which also ends a halt) or aborts a
// rollout.
func (c *Client) RolloutAction(ctx context.Context, name, action string) (*capnv1.Rollout, error) {
	out := new(capnv1.Rollout)
	_, err := c.call(ctx, http.MethodPost, "/v1/rollouts/"+url.PathEscape(name)+"/"+url.PathEscape(action), nil, nil, "", out)
	return out, err
}

// DeleteClass deletes a cluster class and its revision records; refused
// (409, naming them) while clusters use it.
func (c *Client) DeleteClass(ctx context.Context, name string, opts ...WriteOption) (*capnv1.ClusterClass, error) {
	out := new(capnv1.ClusterClass)
	_, err := c.call(ctx, http.MethodDelete, "/v1/clusterclasses/"+url.PathEscape(name), writeQuery(opts), nil, "", out)
	return out, err
}
