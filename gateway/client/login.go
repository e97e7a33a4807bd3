package client

import (
	"context"
	"net/http"
	"strings"

	"github.com/capn-dev/capn/gateway/api"
)

// Login asks for a one-time login code for the dashboard (POST
// /v1/logins): the link at the base URL plus the answer's Path logs a
// browser in once, within 60 seconds, with this client's token's scopes.
func (c *Client) Login(ctx context.Context) (*api.Login, error) {
	var out api.Login
	if _, err := c.call(ctx, http.MethodPost, "/v1/logins", nil, nil, "", &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// LoginURL is the full login link of l at this client's gateway.
func (c *Client) LoginURL(l *api.Login) string {
	u := *c.base
	path, query, _ := strings.Cut(l.Path, "?")
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = query
	return u.String()
}
