package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
)

func TestReportError(t *testing.T) {
	conn := &connection{Server: "http://127.0.0.1:8080", ServerFrom: "CAPN_SERVER", Token: "t", TokenFrom: "/home/u/.config/capn/config.yaml"}
	noToken := &connection{Server: "http://127.0.0.1:8080", ServerFrom: "--server"}
	invalid := &client.Error{StatusCode: 422, Problem: api.Problem{Title: "Invalid cluster", Status: 422,
		Detail: "cannot upgrade cluster demo from v1.34.2 to v1.36.0: 1 field is invalid",
		Errors: []api.FieldViolation{
			{Path: "spec.kubernetesVersion", Value: "v1.36.0", Reason: "skips a minor version"},
			{Path: "spec.workerPools[0]", Reason: "required"},
		}}}
	tests := []struct {
		name     string
		conn     *connection
		err      error
		wantCode int
		want     string
	}{
		{name: "a problem with fields", conn: conn, err: fmt.Errorf("wrapped: %w", invalid), wantCode: 1,
			want: "capn x: Invalid cluster (422): cannot upgrade cluster demo from v1.34.2 to v1.36.0: 1 field is invalid\n" +
				"  spec.kubernetesVersion: \"v1.36.0\": skips a minor version\n  spec.workerPools[0]: required\n"},
		{name: "no token", conn: noToken, err: &client.Error{StatusCode: 401, Problem: api.Problem{Title: "Unauthorized", Detail: "no bearer token"}}, wantCode: 1,
			want: "capn x: Unauthorized (401): no bearer token\n  no token was sent: pass --token, set CAPN_TOKEN, or use a client config with one (CAPN_CONFIG)\n"},
		{name: "a token the gateway does not know", conn: conn, err: &client.Error{StatusCode: 401, Problem: api.Problem{Title: "Unauthorized"}}, wantCode: 1,
			want: "capn x: Unauthorized (401)\n  the token (from /home/u/.config/capn/config.yaml) is not one the gateway at http://127.0.0.1:8080 knows\n"},
		{name: "rate limited", conn: conn, err: &client.Error{StatusCode: 429, RetryAfter: 2 * time.Second, Problem: api.Problem{Title: "Too many requests"}}, wantCode: 1,
			want: "capn x: Too many requests (429)\n  retry after 2s\n"},
		{name: "a body that is no problem", conn: conn, err: &client.Error{StatusCode: 502}, wantCode: 1, want: "capn x: Bad Gateway (502)\n"},
		{name: "unreachable", conn: conn, err: fmt.Errorf("GET /v1/clusters: %w", &url.Error{Op: "Get", URL: "http://127.0.0.1:8080/v1/clusters", Err: syscall.ECONNREFUSED}), wantCode: 1,
			want: "capn x: cannot reach the gateway at http://127.0.0.1:8080 (from CAPN_SERVER): connection refused\n  is capn dev running?"},
		{name: "interrupted", conn: conn, err: context.Canceled, wantCode: 1, want: "capn x: interrupted\n"},
		{name: "a usage mistake", err: usagef("missing NAME"), wantCode: 2, want: "capn x: missing NAME\nSee 'capn x -h' for help.\n"},
		{name: "anything else", err: errors.New("boom"), wantCode: 1, want: "capn x: boom\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if code := reportError(&b, "capn x", tt.conn, tt.err); code != tt.wantCode {
				t.Errorf("exit %d, want %d", code, tt.wantCode)
			}
			if !strings.HasPrefix(b.String(), tt.want) {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tt.want)
			}
		})
	}
}
