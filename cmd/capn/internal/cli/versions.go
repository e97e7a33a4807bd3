package cli

import (
	"context"
	"fmt"

	"github.com/capn-dev/capn/services/daemon"
)

const versionsHelp = `
Shows the Kubernetes version catalogue auto-patch picks from (kind
KubernetesVersions, named default), or with -f sets it from a manifest:

  apiVersion: capn.dev/v1alpha1
  kind: KubernetesVersions
  metadata: {name: default}
  spec:
    versions:
    - {version: v1.34.5, classification: supported}
    - {version: v1.34.2, classification: deprecated}
    - {version: v1.35.0, classification: preview}

A cluster with spec.maintenance.autoPatch moves, in its maintenance window,
to the newest supported patch of its minor (docs/operations.md#maintenance).

Examples:
  capn versions
  capn versions -f versions.yaml
`

func cmdVersions(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn versions [-f FILE]", versionsHelp)
	var a apiFlags
	a.bind(fs)
	var file string
	fs.StringVar(&file, "f", "", "set the catalogue from this manifest `file` (- for standard input)")
	fs.StringVar(&file, "filename", "", "`file`: same as -f")
	const name = "capn versions"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if len(pos) > 0 {
		return reportError(e.stderr, name, nil, usagef("takes no arguments, got %q", pos[0]))
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if file != "" {
		body, err := readInput(e, file)
		if err != nil {
			return reportError(e.stderr, name, nil, err)
		}
		_, created, err := s.c.PutKubernetesVersions(ctx, "default", body)
		if err != nil {
			return s.fail(err)
		}
		verb := "configured"
		if created {
			verb = "created"
		}
		fmt.Fprintf(e.stdout, "kubernetesversions/default %s\n", verb)
		return daemon.ExitOK
	}
	kv, err := s.c.KubernetesVersions(ctx, "default")
	if err != nil {
		return s.fail(err)
	}
	rows := [][]string{{"VERSION", "CLASSIFICATION", "EXPIRES"}}
	for _, v := range kv.GetSpec().GetVersions() {
		class, exp := v.GetClassification(), ""
		if class == "" {
			class = "supported"
		}
		if v.GetExpirationDate() != nil {
			exp = v.GetExpirationDate().AsTime().UTC().Format("2006-01-02")
		}
		rows = append(rows, []string{v.GetVersion(), class, orNone(exp)})
	}
	writeTable(e.stdout, rows)
	return daemon.ExitOK
}
