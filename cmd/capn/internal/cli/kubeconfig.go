package cli

import (
	"context"
	"fmt"

	"github.com/capn-dev/capn/cmd/capn/internal/clientconfig"
	"github.com/capn-dev/capn/services/daemon"
)

const kubeconfigHelp = `
Prints the cluster's admin kubeconfig (or writes it to a file with -o,
mode 0600). It needs a token with the secrets scope (capn dev's admin
token has it). Until the bootstrapper has made it, the gateway answers
404 saying what it waits for.

Examples:
  capn kubeconfig demo > demo.kubeconfig
  capn kubeconfig demo -o ~/.kube/demo && kubectl --kubeconfig ~/.kube/demo get nodes
`

func cmdKubeconfig(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn kubeconfig NAME [-o FILE]", kubeconfigHelp)
	var a apiFlags
	a.bind(fs)
	var out string
	fs.StringVar(&out, "o", "", "write to this `file` (mode 0600) instead of standard output")
	fs.StringVar(&out, "output", "", "`file`: same as -o")
	const name = "capn kubeconfig"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	cluster, err := oneCluster(pos, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	kc, err := s.c.Kubeconfig(ctx, cluster)
	if err != nil {
		return s.fail(err)
	}
	if out == "" {
		_, err = e.stdout.Write(kc)
	} else if err = clientconfig.WriteAtomic(out, kc, 0o600); err == nil {
		fmt.Fprintf(e.stderr, "wrote the kubeconfig of cluster %s to %s\n", cluster, out)
	}
	if err != nil {
		return s.fail(err)
	}
	return daemon.ExitOK
}
