package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/daemon"
)

const externalKubeconfigHelp = `
Registers the kubeconfig of a Kubernetes cluster someone else runs (EKS,
GKE, AKS, kubeadm...), sealed in capn's secrets bucket as NAME. A cluster
whose spec.controlPlane has type: external and external: {kubeconfig: NAME}
uses it: capn checks the API server (version, reachability) into the
control-plane record, prepares it for capn's workers to join with
bootstrap tokens, and manages only the worker pools
(docs/operations.md, External control planes; the RBAC the kubeconfig
needs is deploy/external/rbac.yaml, docs/security.md section 22).

The kubeconfig must work on its own: its current context's server
(https), the CA in certificate-authority-data, and a token or a client
certificate and key embedded (kubectl config view --raw --minify
--flatten writes one); exec and auth-provider plugins and files are
refused, each error naming the field. get shows what is registered
(server, how it authenticates, hash, the clusters using it), never the
credentials; delete is refused while a cluster uses it. Needs a token with
the secrets scope (and write for set and delete).

Examples:
  capn external-kubeconfig set prod-eks --kubeconfig ./prod.kubeconfig
  capn external-kubeconfig get prod-eks
  capn external-kubeconfig delete prod-eks
`

func cmdExternalKubeconfig(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn external-kubeconfig set NAME --kubeconfig FILE | get NAME | delete NAME", externalKubeconfigHelp)
	var a apiFlags
	a.bind(fs)
	file := fs.String("kubeconfig", "", "`FILE` holding the external cluster's kubeconfig (- is standard input); with set")
	const name = "capn external-kubeconfig"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if len(pos) != 2 || (pos[0] != "set" && pos[0] != "get" && pos[0] != "delete") {
		return reportError(e.stderr, name, nil, usagef("want set NAME --kubeconfig FILE, get NAME or delete NAME"))
	}
	verb, kc := pos[0], pos[1]
	if !manifest.IsDNSLabel(kc) {
		return reportError(e.stderr, name, nil, usagef("%q is not a name: it must be a DNS-1123 label", kc))
	}
	switch {
	case verb == "set" && *file == "":
		return reportError(e.stderr, name, nil, usagef("set needs --kubeconfig FILE"))
	case verb != "set" && *file != "":
		return reportError(e.stderr, name, nil, usagef("--kubeconfig goes with set"))
	}
	var data []byte
	if verb == "set" {
		if data, err = readInput(e, *file); err != nil {
			return reportError(e.stderr, name, nil, fmt.Errorf("--kubeconfig %s: %w", *file, err))
		}
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	switch verb {
	case "delete":
		if err := s.c.DeleteExternalKubeconfig(ctx, kc); err != nil {
			return s.fail(err)
		}
		fmt.Fprintf(e.stdout, "external-kubeconfig/%s deleted\n", kc)
		return daemon.ExitOK
	case "get":
		info, err := s.c.ExternalKubeconfig(ctx, kc)
		if err != nil {
			return s.fail(err)
		}
		used := "none"
		if len(info.UsedBy) > 0 {
			used = strings.Join(info.UsedBy, ", ")
		}
		fmt.Fprintf(e.stdout, "Name:     %s\nServer:   %s\nAuth:     %s\nHash:     %s\nUpdated:  %s\nUsed by:  %s\n",
			info.Name, info.Server, info.Auth, info.Hash, info.Updated.UTC().Format("2006-01-02T15:04:05Z"), used)
		return daemon.ExitOK
	}
	info, created, err := s.c.SetExternalKubeconfig(ctx, kc, data)
	if err != nil {
		return s.fail(err)
	}
	what := "configured"
	if created {
		what = "created"
	}
	fmt.Fprintf(e.stdout, "external-kubeconfig/%s %s (server %s, %s, hash %s)\n", kc, what, info.Server, info.Auth, info.Hash)
	return daemon.ExitOK
}
