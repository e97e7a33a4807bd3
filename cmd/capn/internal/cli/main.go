// Package cli is the capn command line: kubectl-shaped commands (apply,
// get, describe, scale, upgrade, delete, ...) that talk to the gateway's API
// through gateway/client, `capn import` for Cluster API manifests, `capn
// dev`, which runs an embedded NATS server, every capn service and the
// gateway on one machine, and `capn nats-config`, which renders the NATS
// side of a deployment on a JetStream cluster (docker-compose.yaml).
// docs/cli.md is the reference.
//
// Each command is one entry in commands(): a name, a one-line summary and
// a function that parses its own flags with the standard flag package.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/capn-dev/capn/services/daemon"
)

// env is what a command runs with, so that tests can give their own.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	lookup         func(string) (string, bool)
}

// command is one `capn <name>`. run gets the arguments after the name
// and returns the exit code; it prints its own usage for -h.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e env, args []string) int
}

// commands lists every command in the order help shows them. Add new
// ones here.
func commands() []command {
	return []command{
		{"apply", "create or update clusters and add-on sets from a manifest (-f FILE, --wait)", cmdApply},
		{"diff", "show what an apply would change (-f FILE; exit 1 when it would)", cmdDiff},
		{"get", "list clusters, machines, add-on sets or cluster classes (-o wide|yaml|json, -w, -l)", cmdGet},
		{"describe", "show a cluster as a tree of control plane, pools and machines", cmdDescribe},
		{"scale", "set the replicas of a worker pool or the control plane", cmdScale},
		{"upgrade", "set a cluster's Kubernetes version (--wait, --respect-window)", cmdUpgrade},
		{"versions", "show or set (-f FILE) the Kubernetes versions auto-patch picks from", cmdVersions},
		{"delete", "delete a cluster, one machine to replace it (--wait), an add-on set or a cluster class", cmdDelete},
		{"hook", "hold a machine's deletion with a lifecycle hook (add|release|list)", cmdHook},
		{"pause", "stop capn from acting on a cluster", cmdPause},
		{"resume", "let capn act on a paused cluster again", cmdResume},
		{"hibernate", "stop a cluster's machines, keeping them", cmdHibernate},
		{"wake", "start a hibernated cluster's machines again", cmdWake},
		{"rollout", "roll a class revision, a version or variables out to clusters in waves (status|list|pause|resume|abort)", cmdRollout},
		{"kubeconfig", "print a cluster's admin kubeconfig", cmdKubeconfig},
		{"addon-secret", "seal objects with credentials for add-on sets (set NAME -f FILE | delete NAME)", cmdAddonSecret},
		{"bootstrap-secret", "seal values bootstrap files take content from (set NAME --from-file KEY=FILE | delete NAME)", cmdBootstrapSecret},
		{"external-kubeconfig", "register an external cluster's kubeconfig, sealed (set NAME --kubeconfig FILE | get NAME | delete NAME)", cmdExternalKubeconfig},
		{"backup", "back up the management plane to a file, or list the stored backups", cmdBackup},
		{"restore", "restore a backup into this deployment (--merge, --dry-run)", cmdRestore},
		{"etcd", "snapshot a kube-local cluster's etcd, list its snapshots, restore one (snapshot|snapshots|restore)", cmdEtcd},
		{"rotate-ca", "rotate a kube-local cluster's CA without downtime (--until PHASE, --continue)", cmdRotateCA},
		{"move", "hand live clusters to another capn deployment (--to CONFIG)", cmdMove},
		{"events", "print a cluster's timeline (--follow)", cmdEvents},
		{"dashboard", "open the dashboard in a browser, logged in by a one-time link", cmdDashboard},
		{"import", "convert Cluster API manifests to a capn Cluster (and AddonSets)", cmdImport},
		{"dev", "run NATS with JetStream and every capn service on this machine", cmdDev},
		{"nats-config", "render a 3-node JetStream deployment's NATS config, users and certificates (render|provision|users)", cmdNATSConfig},
		{"version", "print capn's version", cmdVersion},
		{"help", "show this help, or a command's (capn help <command>)", cmdHelp},
	}
}

// Main runs the command line args (os.Args[1:]) with the process's stdin,
// stdout, stderr and environment, and returns the exit code. release is
// the version the binary was built as ("": the module version).
func Main(ctx context.Context, release string, args []string) int {
	version = release
	return run(ctx, env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, lookup: os.LookupEnv}, args)
}

// run dispatches args to a command and returns the exit code.
func run(ctx context.Context, e env, args []string) int {
	if len(args) == 0 {
		usage(e.stderr)
		return daemon.ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(e.stdout)
		return daemon.ExitOK
	}
	if c, ok := lookupCommand(args[0]); ok {
		return c.run(ctx, e, args[1:])
	}
	fmt.Fprintf(e.stderr, "capn: unknown command %q\n\n", args[0])
	usage(e.stderr)
	return daemon.ExitUsage
}

func lookupCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func usage(w io.Writer) {
	fmt.Fprint(w, "capn manages Kubernetes clusters with small services talking over NATS JetStream.\n\n")
	fmt.Fprint(w, "usage: capn <command> [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "\nRun 'capn help <command>' or 'capn <command> -h' for a command's flags.\n")
	fmt.Fprintf(w, "Commands that talk to the gateway take --server and --token, else %s and %s,\n", envServer, envToken)
	fmt.Fprintf(w, "else the file %s names, else the client config capn dev writes (docs/cli.md).\n", envConfig)
}

func cmdHelp(ctx context.Context, e env, args []string) int {
	switch len(args) {
	case 0:
		usage(e.stdout)
		return daemon.ExitOK
	case 1:
		switch args[0] {
		case "help", "-h", "-help", "--help":
			usage(e.stdout)
			return daemon.ExitOK
		}
		if c, ok := lookupCommand(args[0]); ok {
			return c.run(ctx, e, []string{"-h"}) // every command prints its help on stdout
		}
		fmt.Fprintf(e.stderr, "capn help: unknown command %q\n\n", args[0])
	}
	usage(e.stderr)
	return daemon.ExitUsage
}

// exitFor is the exit code of a flag.FlagSet.Parse error: 0 for -h.
func exitFor(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return daemon.ExitOK
	}
	return daemon.ExitUsage
}
