package client

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// AddHook holds machine's deletion at req.Phase until the hook is released
// (POST …/machines/{machine}/hooks). added is false when req.Holder (the
// token's name when empty) already held it; IsConflict when another holder
// does.
func (c *Client) AddHook(ctx context.Context, cluster, machine string, req api.HookRequest) (h *api.Hook, added bool, err error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, false, err
	}
	h = new(api.Hook)
	code, err := c.call(ctx, http.MethodPost, machinePath(cluster, machine)+"/hooks", nil, bytes.NewReader(b), api.MediaJSON, h)
	if err != nil {
		return nil, false, err
	}
	return h, code == http.StatusCreated, nil
}

// ReleaseOptions are a hook release's holder (empty: the token's name) and
// whether to release a hook another holder holds.
type ReleaseOptions struct {
	Holder string
	Force  bool
}

// ReleaseHook removes a hook (DELETE …/hooks/{phase}/{name}) and returns
// it; IsNotFound when the machine has no such hook, IsConflict when
// another holder holds it and opts.Force is false.
func (c *Client) ReleaseHook(ctx context.Context, cluster, machine, phase, name string, opts ReleaseOptions) (*api.Hook, error) {
	q := url.Values{}
	if opts.Holder != "" {
		q.Set(api.ParamHolder, opts.Holder)
	}
	if opts.Force {
		q.Set(api.ParamForce, strconv.FormatBool(true))
	}
	h := new(api.Hook)
	_, err := c.call(ctx, http.MethodDelete, machinePath(cluster, machine)+"/hooks/"+url.PathEscape(phase)+"/"+url.PathEscape(name), q, nil, "", h)
	return h, err
}

// Hooks lists a cluster's lifecycle hooks (GET /v1/clusters/{name}/hooks).
func (c *Client) Hooks(ctx context.Context, cluster string) ([]api.Hook, error) {
	var l api.HookList
	if _, err := c.call(ctx, http.MethodGet, "/v1/clusters/"+url.PathEscape(cluster)+"/hooks", nil, nil, "", &l); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// DeleteMachine requests a machine's deletion (202): capn drains it,
// deletes it and the cluster-planner replaces it. It returns the machine
// with its deletion timestamp.
func (c *Client) DeleteMachine(ctx context.Context, cluster, machine string, opts ...WriteOption) (*capnv1.Machine, error) {
	out := new(capnv1.Machine)
	_, err := c.call(ctx, http.MethodDelete, machinePath(cluster, machine), writeQuery(opts), nil, "", out)
	return out, err
}

func machinePath(cluster, machine string) string {
	return "/v1/clusters/" + url.PathEscape(cluster) + "/machines/" + url.PathEscape(machine)
}
