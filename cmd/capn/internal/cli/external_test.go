package cli

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/secrets/pki"
)

// capn external-kubeconfig on a real capn dev: set seals it and prints
// what it is, get shows the server and never the token, a kubeconfig capn
// cannot use is refused naming the field, usage errors come before any
// request, delete removes it.
func TestExternalKubeconfigOnCapnDev(t *testing.T) {
	a := newApplyTest(t)
	ca, err := pki.NewCA("external", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const token = "s3cret.external-token"
	kc := "apiVersion: v1\nkind: Config\ncurrent-context: prod\ncontexts:\n- name: prod\n  context: {cluster: prod, user: capn}\n" +
		"clusters:\n- name: prod\n  cluster:\n    server: https://10.1.2.3:6443\n    certificate-authority-data: " + base64.StdEncoding.EncodeToString(ca.CertPEM) + "\n" +
		"users:\n- name: capn\n  user:\n    token: " + token + "\n"
	f := a.file("prod.kubeconfig", kc)
	code, stdout, stderr := a.run("", "external-kubeconfig", "set", "prod", "--kubeconfig", f)
	if code != 0 || !strings.HasPrefix(stdout, "external-kubeconfig/prod created (server https://10.1.2.3:6443, token, hash ") {
		t.Fatalf("set: %d %s %s", code, stdout, stderr)
	}
	printed := stdout + stderr
	code, stdout, stderr = a.run("", "external-kubeconfig", "get", "prod")
	printed += stdout + stderr
	if code != 0 || !strings.Contains(stdout, "Server:   https://10.1.2.3:6443\nAuth:     token\n") || !strings.Contains(stdout, "Used by:  none\n") {
		t.Errorf("get: %d %s %s", code, stdout, stderr)
	}
	code, stdout, stderr = a.run(strings.Replace(kc, "    token: "+token+"\n", "    exec: {command: aws}\n", 1),
		"external-kubeconfig", "set", "prod", "--kubeconfig", "-")
	printed += stdout + stderr
	if code == 0 || !strings.Contains(stderr, "users[capn].user.exec") {
		t.Errorf("an exec kubeconfig: %d %s %s", code, stdout, stderr)
	}
	for _, bad := range [][]string{
		{"external-kubeconfig", "set", "prod"},
		{"external-kubeconfig", "get", "prod", "--kubeconfig", f},
		{"external-kubeconfig", "set", "Bad_Name", "--kubeconfig", f},
		{"external-kubeconfig", "list"},
	} {
		if code, _, stderr := a.run("", bad...); code == 0 || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q: want a usage error", bad, code, stderr)
		}
	}
	if strings.Contains(printed, "s3cret") {
		t.Errorf("the token was printed: %s", printed)
	}
	code, stdout, _ = a.run("", "external-kubeconfig", "delete", "prod")
	a.want("delete", code, stdout, "", 0, "external-kubeconfig/prod deleted\n", "")
	if code, _, stderr := a.run("", "external-kubeconfig", "get", "prod"); code == 0 || !strings.Contains(stderr, "not found") {
		t.Errorf("get after delete: %d %s", code, stderr)
	}
}
