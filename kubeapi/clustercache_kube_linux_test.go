package kubeapi_test

import (
	"testing"
	"time"

	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	"github.com/capn-dev/capn/secrets/pki"
)

// Against a real kube-apiserver: what its answers make of a cluster's
// state as the kubeconfig changes — a CA the server's certificate is not
// of (unreachable), an admin certificate of another CA (refused: 401), the
// cluster's own (answering) — each change a new client, and an answer
// ending the backoff the failures built.
func TestClusterCacheAgainstKubeAPIServer(t *testing.T) {
	kubeapitest.Require(t)
	caPair, _, _ := newCA(t, "kubernetes")
	otherCA, _, otherAdmin := newCA(t, "other")
	sa, err := pki.NewServiceAccountKey()
	if err != nil {
		t.Fatal(err)
	}
	api := kubeapitest.Start(t, caPair, sa.PublicPEM, sa.PrivatePEM)

	kc := &kubeconfigs{}
	clk := &clock{t: time.Now()} // stands still: Wait is exact
	c := kubeapi.NewClusterCache(kubeapi.ClusterCacheConfig{Kubeconfig: kc.get, BackoffBase: time.Hour, BackoffMax: 4 * time.Hour, Now: clk.Now})
	defer c.Close()
	var last *kubeapi.Client
	attempt := func() kubeapi.Attempt {
		t.Helper()
		client, err := c.Client(t.Context(), "c")
		if err != nil {
			t.Fatal(err)
		}
		if client == last {
			t.Fatal("a new kubeconfig revision kept the old client")
		}
		last = client
		if err := client.Get(t.Context(), "/api/v1/nodes", &struct{}{}); err != nil {
			return c.Failed("c", err)
		}
		return c.Answered("c")
	}
	tests := []struct {
		name      string
		caPEM     []byte
		admin     pki.KeyPair
		wantState kubeapi.ClusterState
		wantRetry time.Duration
	}{
		{"CA before a rotation", otherCA.CertPEM, api.AdminPair, kubeapi.StateUnreachable, time.Hour},
		{"admin certificate of another CA", caPair.CertPEM, otherAdmin, kubeapi.StateRefused, 2 * time.Hour},
		{"the cluster's own", caPair.CertPEM, api.AdminPair, kubeapi.StateAnswering, 0},
	}
	for _, tt := range tests {
		kc.set(render(t, api.URL, tt.caPEM, tt.admin), nil)
		a := attempt()
		if a.State != tt.wantState || !a.Changed || a.RetryIn != tt.wantRetry || a.Server != api.URL {
			t.Fatalf("%s: %+v; want state %s (changed), retry in %s, server %s", tt.name, a, tt.wantState, tt.wantRetry, api.URL)
		}
		if w := c.Wait("c"); w != tt.wantRetry {
			t.Fatalf("%s: Wait = %s, want %s", tt.name, w, tt.wantRetry)
		}
	}
}
