package bootstrapper_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/kubeapi"
	"github.com/capn-dev/capn/kubeapi/kubeapitest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper"
)

// The same flow against a real etcd and kube-apiserver (the binaries of
// `make kube`, found in $CAPN_KUBE_BIN; skipped without them and with
// -short): the token the bootstrapper registers authenticates as a joining
// node — what a worker of a kube-local cluster needs — and stops working
// once the machine joined.
func TestJoinTokensWithARealAPIServer(t *testing.T) {
	kubeapitest.Require(t)
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.startWith(bootstrapper.Config{Keyring: ring, Workers: 2})
	const c = "real"
	e.applyClusterWith(c, "kube-local", "")
	e.waitPKI(ring, c)
	set := e.openPKI(ring, c)

	// kube-apiserver with the cluster's PKI.
	api := kubeapitest.Start(t, pki.KeyPair{CertPEM: []byte(set.GetCa().GetCertPem()), KeyPEM: []byte(set.GetCa().GetKeyPem())},
		[]byte(set.GetServiceAccount().GetCertPem()), []byte(set.GetServiceAccount().GetKeyPem()), "--enable-bootstrap-token-auth")
	server, adminClient := api.URL, api.Admin

	e.reportEndpointAt(c, int32(api.Port))
	e.generate(e.collect(c), c, "real-w-0", "worker", false, &capnv1.BootstrapSpec{Provider: "kube-local"})
	rec := e.record(ring, c, "real-w-0")
	tok, err := token.Parse(rec.GetToken())
	if err != nil {
		t.Fatal(err)
	}
	// whoami asks the API server who the token is (SelfSubjectReview: any
	// authenticated user may).
	whoami := func() (string, []string, error) {
		tc, err := kubeapi.NewTokenClient(server, []byte(set.GetCa().GetCertPem()), tok.Value())
		if err != nil {
			return "", nil, err
		}
		defer tc.Close()
		var out struct {
			Status struct {
				UserInfo struct {
					Username string   `json:"username"`
					Groups   []string `json:"groups"`
				} `json:"userInfo"`
			} `json:"status"`
		}
		err = tc.Do(context.Background(), http.MethodPost, "/apis/authentication.k8s.io/v1/selfsubjectreviews", "application/json",
			map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}, &out)
		return out.Status.UserInfo.Username, out.Status.UserInfo.Groups, err
	}
	natstest.WaitFor(t, 20*time.Second, "the worker's token to authenticate as a joining node", func() bool {
		user, groups, err := whoami()
		return err == nil && user == "system:bootstrap:"+tok.ID && strings.Contains(strings.Join(groups, ","), token.NodeGroup)
	})
	var secret struct {
		Type string            `json:"type"`
		Data map[string][]byte `json:"data"`
	}
	if err := adminClient.Get(context.Background(), "/api/v1/namespaces/kube-system/secrets/"+token.SecretName(tok), &secret); err != nil {
		t.Fatal(err)
	}
	if secret.Type != token.SecretType || string(secret.Data["expiration"]) != rec.GetTokenExpires().AsTime().UTC().Format(time.RFC3339) {
		t.Fatalf("Secret type %q, expiration %q; want %s, %s", secret.Type, secret.Data["expiration"], token.SecretType, rec.GetTokenExpires().AsTime().UTC().Format(time.RFC3339))
	}

	e.setPhase(c, "real-w-0", "Running")
	natstest.WaitFor(t, 20*time.Second, "the token refused once the machine joined", func() bool {
		_, _, err := whoami()
		return kubeapi.IsStatus(err, http.StatusUnauthorized)
	})
	if err := adminClient.Get(context.Background(), "/api/v1/namespaces/kube-system/secrets/"+token.SecretName(tok), &struct{}{}); !kubeapi.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("the Secret after the join: %v, want 404", err)
	}
}
