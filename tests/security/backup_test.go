package security

import (
	"bytes"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/schemas/backupfile"
	"github.com/capn-dev/capn/secrets/seal"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// TestBackupNeedsTheSecretsScope attacks the backup API with a token that
// may do everything but read secrets: it must get no backup (a backup
// holds every cluster's sealed CA keys, kubeconfigs and bootstrap data),
// download none, and restore none; the same requests with the secrets
// scope succeed, so the scope is what stops it. The file a backup gives
// keeps the secrets sealed: neither the key nor a private key is in it.
func TestBackupNeedsTheSecretsScope(t *testing.T) {
	if testing.Short() {
		t.Skip("attack against real processes: skipped with -short")
	}
	keyHex := strings.Repeat("5a", seal.KeySize)
	key, err := seal.NewKey(mustHex(t, keyHex))
	if err != nil {
		t.Fatal(err)
	}
	ring, err := seal.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	sys := harness.New(t, harness.Options{Keyring: ring})
	sys.StartAll(harness.Core...)
	sys.Start(harness.Backup)
	const everything, keeper = "t-everything-but-secrets-0123", "t-secrets-keeper-0123"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gw := gateway.New(gateway.Options{Listener: ln, Keyring: ring, Tokens: []gateway.Token{
		{Name: "operator", Secret: everything, Scopes: []api.Scope{api.ScopeRead, api.ScopeWrite, api.ScopeIngest}},
		{Name: "keeper", Secret: keeper, Scopes: []api.Scope{api.ScopeRead, api.ScopeWrite, api.ScopeSecrets}},
	}})
	sys.StartService("gateway-scoped", gw)
	natstest.WaitFor(t, 30*time.Second, "the gateway listens", func() bool { return gw.URL() != "" })
	sys.Apply(clusterYAML("c1", 1))
	waitPKI(t, sys, "c1")

	op, err := client.New(gw.URL(), client.WithToken(everything))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = op.Backup(t.Context(), nil, "")
	if client.StatusCode(err) != http.StatusForbidden {
		t.Fatalf("a token without the secrets scope took a backup: %v", err)
	}
	if _, err := op.DownloadBackup(t.Context(), "anything"); client.StatusCode(err) != http.StatusForbidden {
		t.Errorf("a token without the secrets scope downloads backups: %v", err)
	}

	// The same requests with the secrets scope work: the scope is the
	// defence.
	kc, err := client.New(gw.URL(), client.WithToken(keeper))
	if err != nil {
		t.Fatal(err)
	}
	body, name, err := kc.Backup(t.Context(), nil, "")
	if err != nil {
		t.Fatalf("the keeper's backup: %v", err)
	}
	file, err := io.ReadAll(body)
	_ = body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.DownloadBackup(t.Context(), name); client.StatusCode(err) != http.StatusForbidden {
		t.Errorf("a token without the secrets scope downloaded backup %s: %v", name, err)
	}
	if _, err := op.Restore(t.Context(), file, client.RestoreOptions{DryRun: true}); client.StatusCode(err) != http.StatusForbidden {
		t.Errorf("a token without the secrets scope restores: %v", err)
	}

	// Sealed: the file has secrets, but no private key and not the key.
	f, err := backupfile.Decode(file)
	if err != nil {
		t.Fatal(err)
	}
	secrets := 0
	for _, e := range f.Entries {
		if e.GetBucket() == backupfile.BucketSecrets {
			secrets++
		}
	}
	if secrets == 0 || len(f.Manifest.GetSealKeyIds()) != 1 || f.Manifest.GetSealKeyIds()[0] != key.ID() {
		t.Fatalf("the backup holds %d secrets sealed with %v", secrets, f.Manifest.GetSealKeyIds())
	}
	for _, leak := range [][]byte{[]byte("PRIVATE KEY"), mustHex(t, keyHex), []byte(keyHex)} {
		if bytes.Contains(file, leak) {
			t.Errorf("the backup file holds %q in the clear", leak)
		}
	}
	t.Logf("backup %s: %d bytes, %d sealed secrets (key %s), no private key or key material in the clear", name, len(file), secrets, key.ID())
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitPKI waits for cluster's PKI (the secrets a backup must keep sealed).
func waitPKI(t *testing.T, sys *harness.System, cluster string) {
	t.Helper()
	natstest.WaitFor(t, 60*time.Second, cluster+"'s PKI", func() bool {
		return len(harness.Keys(t, sys.Observed, "secrets."+cluster)) == 1 && sys.IsReady(cluster)
	})
}
