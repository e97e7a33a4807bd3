package natsconfig_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/capn-dev/capn/deploy/natsconfig"
	"github.com/capn-dev/capn/deploy/natsconfig/natsconfigtest"
)

// TestStaticUsersSkipTheCallout starts a node from the rendered compose
// configuration (auth_callout included, parsed by nats-server itself) with
// nobody answering the callout: every static user still logs in — each is
// one of the callout's auth_users, so none waits for the bootstrapper —
// while a machine's login, which only the callout can accept, is refused.
func TestStaticUsersSkipTheCallout(t *testing.T) {
	d := natsconfig.Compose()
	d.Servers, d.Replicas = d.Servers[:1], 1
	c := natsconfigtest.Start(t, d)
	opts, err := server.ProcessConfigFile(c.Rendered.ServerConfig(c.D.Servers[0].Name))
	if err != nil || opts.AuthCallout == nil || opts.AuthCallout.Issuer != c.Rendered.CalloutIssuer {
		t.Fatalf("the node runs without the rendered auth callout: %+v (%v)", opts, err)
	}
	for _, u := range d.Users() {
		start := time.Now()
		nc, _, _ := c.Connect(u.Name, 0)
		if rtt, err := nc.RTT(); err != nil {
			t.Errorf("%s: %v", u.Name, err)
		} else if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%s: logged in in %s (%s round trip): it waited for the callout", u.Name, took, rtt)
		}
	}
	m := natsconfigtest.Machine{Cluster: "c1", Name: "w-0", Credential: "anything"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, _, err := c.ConnectMachine(ctx, m, m.Credential, 0); err == nil {
		t.Error("a machine logged in with no callout service")
	}
}
