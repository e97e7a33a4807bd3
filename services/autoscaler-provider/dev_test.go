package autoscalerprovider_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/schemas/externalgrpc"
	autoscalerprovider "github.com/capn-dev/capn/services/autoscaler-provider"
)

// TestServeWhenAsked is capn dev's mode: nothing is served until a cluster
// has an autoscaled pool; then the API answers and the cluster's cloud
// config is written, pointing at the API.
func TestServeWhenAsked(t *testing.T) {
	clients := t.TempDir()
	w := newWorld(t, func(c *autoscalerprovider.Config) {
		c.ServeWhenAsked = true
		// The world's CA, in a directory of its own: the test's clients
		// write theirs beside the world's.
		c.ClientsDir = clients
		for _, f := range []string{"ca.crt", "ca.key"} {
			b, err := os.ReadFile(filepath.Join(filepath.Dir(c.TLSClientCA), f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(clients, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	})
	cloudConfig := filepath.Join(clients, "clients", "demo", "cloud-config")
	w.cluster("demo", pool("md-0", 1, 0, 0)) // no autoscaling yet
	short, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c := w.client("demo")
	if _, err := c.NodeGroups(short, &externalgrpc.NodeGroupsRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("served before any cluster asked: %v", err)
	}
	if _, err := os.Stat(cloudConfig); err == nil {
		t.Fatal("a cloud config was written for a cluster without autoscaling")
	}
	w.cluster("demo", pool("md-0", 1, 1, 3))
	natstest.WaitFor(t, 10*time.Second, "the API answering", func() bool {
		gs, err := c.NodeGroups(ctx(t), &externalgrpc.NodeGroupsRequest{})
		return err == nil && len(gs.GetNodeGroups()) == 1
	})
	natstest.WaitFor(t, 10*time.Second, "demo's cloud config", func() bool {
		b, err := os.ReadFile(cloudConfig)
		return err == nil && strings.Contains(string(b), w.addr)
	})
}
