package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/internal/testkit"
)

// greeter is a probe with a setting of its own.
type greeter struct {
	*probe
	greeting string
}

func (g *greeter) Flags() []Flag {
	return []Flag{{Name: "greeting", Env: "CAPN_GREETING", Usage: "what to say", Value: StringValue(&g.greeting)}}
}

func (g *greeter) Validate() error {
	if g.greeting == "" {
		return &FieldError{Flag: "greeting", Env: "CAPN_GREETING", Value: g.greeting, Problem: "must not be empty"}
	}
	return nil
}

func TestMainArgs(t *testing.T) {
	s := natstest.Start(t)
	tests := []struct {
		name         string
		args         []string
		env          map[string]string
		wantCode     int
		wantOut      []string
		wantGreeting string
	}{
		{name: "help", args: []string{"-h"}, wantCode: ExitOK,
			wantOut: []string{"usage: probe [flags]", "-nats-url url", "[$CAPN_NATS_URL]", "-greeting", "[$CAPN_GREETING]"}},
		{name: "every problem at once", args: []string{"--log-level", "loud", "--nats-url", "http://x"},
			env: map[string]string{"CAPN_STREAM_REPLICAS": "many", "CAPN_HTTP_ADDR": "nowhere"}, wantCode: ExitUsage,
			wantOut: []string{
				"probe: invalid configuration:",
				`  - --stream-replicas (CAPN_STREAM_REPLICAS) "many": not an integer`,
				`  - --http-addr (CAPN_HTTP_ADDR) "nowhere": must be host:port`,
				`  - --log-level (CAPN_LOG_LEVEL) "loud": must be one of`,
				`  - --nats-url (CAPN_NATS_URL) "http://x": must be nats://host:port`,
				`  - --greeting (CAPN_GREETING) "": must not be empty`,
			}},
		{name: "unexpected argument", args: []string{"serve"}, wantCode: ExitUsage, wantOut: []string{`unexpected argument "serve"`}},
		{name: "unknown flag", args: []string{"--nope"}, wantCode: ExitUsage, wantOut: []string{"flag provided but not defined: -nope"}},
		{name: "runs until cancelled, service flag from env", args: []string{"--http-addr", "127.0.0.1:0", "--log-format", "json"},
			env: map[string]string{"CAPN_NATS_URL": s.URL(), "CAPN_GREETING": "hello"}, wantCode: ExitOK,
			wantOut: []string{`"message":"service stopped"`}, wantGreeting: "hello"},
		{name: "service flag beats its env", args: []string{"--http-addr", "off", "--greeting", "hi", "--nats-url", s.URL()},
			env: map[string]string{"CAPN_GREETING": "hello"}, wantCode: ExitOK, wantGreeting: "hi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := &greeter{probe: newProbe()}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				// A running service stops as if by SIGTERM once it started.
				select {
				case d := <-g.deps:
					g.deps <- d
					cancel()
				case <-ctx.Done():
				}
			}()
			out := &testkit.Buffer{}
			code := MainArgs(ctx, g, tt.args, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }, out)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d; output:\n%s", code, tt.wantCode, out)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if g.greeting != tt.wantGreeting && tt.wantGreeting != "" {
				t.Errorf("greeting = %q, want %q", g.greeting, tt.wantGreeting)
			}
		})
	}
}

func TestProblems(t *testing.T) {
	err := errors.Join(errors.New("a"), errors.Join(errors.New("b"), nil, errors.New("c")))
	if got := strings.Join(Problems(err), ","); got != "a,b,c" {
		t.Errorf("Problems() = %q", got)
	}
	if Problems(nil) != nil {
		t.Error("Problems(nil) != nil")
	}
}
