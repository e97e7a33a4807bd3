package cli

import (
	"bytes"
	"context"
	"fmt"

	"github.com/capn-dev/capn/schemas/capi"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/daemon"
)

const importHelp = `
Converts Cluster API manifests (cluster.x-k8s.io v1beta1 and v1beta2: a
Cluster with its KubeadmControlPlane, MachineDeployments,
KubeadmConfigTemplates, MachineHealthChecks and infrastructure objects) into
one capn Cluster manifest, printed on standard output, followed by an
AddonSet for each ClusterResourceSet (addons.cluster.x-k8s.io; an input of
ClusterResourceSets only gives the sets alone). A ClusterResourceSet's
ConfigMaps (in the input) become inline manifests, one per data key in key
order; its Secrets become references to add-on secrets of their names,
whose content is never printed: store it with capn addon-secret set.

The infrastructure kinds choose the capn provider: Docker* kinds → docker,
Cluster API's in-memory kinds (InMemory*, Dev* with the inMemory backend)
→ sim. Any other kind needs --provider, which, when given, is used for
every machine.

Everything that could not be mapped is listed on standard error, one line
per field with its path, and why. The result is validated: when it breaks
a rule of capn's, the problems are listed and the exit code is 1 (the
manifest is still printed, to be fixed by hand).

A ClusterClass-based cluster (spec.topology) is imported with its class
when the input holds it: the class's templates give the provider, the
bootstrap settings and the health checks; its variables and patches are
listed by name (capn cannot evaluate patches).

--classes imports such a cluster as a capn ClusterClass (printed first)
and a Cluster with spec.topology instead: the class's template is the
cluster's spec without pools, the machine deployment classes the topology
uses become pool classes, and a variable (string, integer or boolean)
maps when every patch reading it sets a machine label of every machine
deployment class (path /workerPools/*/labels/KEY); the topology's
machine deployments become pools (name, class, replicas) and its values of
mapped variables are kept. The ClusterClass must be in the input.

--strict makes any of this an error: when something is not mapped, or the
result does not validate, the list goes to standard error, nothing is
printed on standard output, and the exit code is 1.

Examples:
  capn import -f capi-quickstart.yaml > demo.yaml
  capn import -f capi-quickstart.yaml --strict | capn apply -f -
  clusterctl generate cluster demo --flavor development | capn import -f - --provider sim | capn apply -f -
  capn import -f calico-crs.yaml > calico-addonset.yaml
`

func cmdImport(_ context.Context, e env, args []string) int {
	fs := newFlags(e, "capn import -f FILE|- [--provider NAME] [--cluster NAME] [--classes] [--strict] [--quiet]", importHelp)
	var file string
	var opts capi.Options
	var quiet, strict bool
	fs.StringVar(&file, "f", "", "Cluster API manifests `file`, or - for standard input")
	fs.StringVar(&file, "filename", "", "`file`: same as -f")
	fs.StringVar(&opts.Provider, "provider", "", "capn provider `name` of every machine (required for kinds capn has no provider for)")
	fs.StringVar(&opts.Cluster, "cluster", "", "the Cluster to import when the input holds several (its `name`)")
	fs.BoolVar(&opts.Classes, "classes", false, "import a topology cluster as a capn ClusterClass and a Cluster with spec.topology")
	fs.BoolVar(&quiet, "quiet", false, "do not list what could not be mapped")
	fs.BoolVar(&strict, "strict", false, "fail (exit 1, nothing on standard output) when anything is not mapped or the result does not validate")
	const name = "capn import"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if err := wantArgs(pos); err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if file == "" {
		return reportError(e.stderr, name, nil, usagef("-f is required: a Cluster API manifests file, or - for standard input"))
	}
	if opts.Provider != "" && !manifest.IsDNSLabel(opts.Provider) {
		return reportError(e.stderr, name, nil, usagef("--provider %q: not a provider name: it must be a DNS-1123 label, e.g. sim", opts.Provider))
	}
	data, err := readInput(e, file)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	res, err := capi.Import(data, opts)
	if err != nil {
		return reportError(e.stderr, name, nil, fmt.Errorf("%s: %w", file, err))
	}
	if strict && (len(res.Notes) > 0 || res.Invalid != nil) {
		if len(res.Notes) > 0 {
			fmt.Fprintf(e.stderr, "capn import: --strict: %s not mapped, so nothing is printed:\n", plural(len(res.Notes), "Cluster API setting"))
			listNotes(e, res.Notes)
		}
		reportInvalid(e, file, res.Invalid)
		return daemon.ExitFailed
	}
	out, err := importOutput(res)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if _, err := e.stdout.Write(out); err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if len(res.Notes) > 0 && !quiet {
		fmt.Fprintf(e.stderr, "capn import: %s not mapped:\n", plural(len(res.Notes), "Cluster API setting"))
		listNotes(e, res.Notes)
	}
	if res.Invalid != nil {
		reportInvalid(e, file, res.Invalid)
		return daemon.ExitFailed
	}
	return daemon.ExitOK
}

// importOutput is the class (with --classes), the cluster (when the input had one) and every add-on
// set, as one YAML stream.
func importOutput(res *capi.Result) ([]byte, error) {
	var docs [][]byte
	if res.Class != nil {
		b, err := manifest.EncodeMessage(res.Class)
		if err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
	if res.Cluster != nil {
		b, err := manifest.Encode(res.Cluster)
		if err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
	for _, s := range res.AddonSets {
		b, err := manifest.EncodeAddonSet(s)
		if err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
	return bytes.Join(docs, []byte("---\n")), nil
}

func listNotes(e env, notes []capi.Note) {
	for _, n := range notes {
		fmt.Fprintf(e.stderr, "  %s\n", n)
	}
}

// reportInvalid lists the validation problems of the imported cluster.
func reportInvalid(e env, file string, invalid error) {
	if invalid == nil {
		return
	}
	problems := daemon.Problems(invalid)
	fmt.Fprintf(e.stderr, "capn import: the manifests made from %s are not valid (%s): fix them before applying them\n", file, plural(len(problems), "problem"))
	for _, p := range problems {
		fmt.Fprintf(e.stderr, "  %s\n", p)
	}
}
