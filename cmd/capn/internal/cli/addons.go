package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/conditions"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/daemon"
)

// Add-on sets in the CLI: capn get addonsets, capn delete addonset, the
// add-on records in capn describe cluster, and capn addon-secret.

// getAddonSets prints capn get addonsets [NAME...].
func (s *session) getAddonSets(ctx context.Context, o getOpts) error {
	var sets []*capnv1.AddonSet
	if len(o.names) > 0 {
		for _, name := range o.names {
			set, err := s.c.AddonSet(ctx, name)
			if err != nil {
				return err
			}
			sets = append(sets, set)
		}
	} else {
		var err error
		if sets, err = s.c.AddonSets(ctx, client.ListOptions{LabelSelector: o.selector}); err != nil {
			return err
		}
	}
	w := s.e.stdout
	switch o.output {
	case outTable, outWide:
		if len(sets) == 0 {
			fmt.Fprintln(s.e.stderr, "No resources found.")
			return nil
		}
		now := time.Now()
		rows := [][]string{addonSetHeader(o.output == outWide)}
		for _, set := range sets {
			rows = append(rows, addonSetRow(set, now, o.output == outWide))
		}
		writeTable(w, rows)
		return nil
	}
	objs := make([]proto.Message, len(sets))
	for i, set := range sets {
		objs[i] = set
	}
	return printObjects(w, o.output, api.KindAddonSetList, len(o.names) == 1, objs)
}

func addonSetHeader(wide bool) []string {
	h := []string{"NAME", "MODE", "ORDER", "BLOCKING", "APPLIED", "AGE"}
	if wide {
		h = append(h, "SELECTOR", "ON-REMOVE", "GENERATION", "NOT APPLIED")
	}
	return h
}

// addonSetRow: APPLIED is the clusters whose record says the set is
// applied out of the clusters with a record; NOT APPLIED names the others
// with their reason.
func addonSetRow(set *capnv1.AddonSet, now time.Time, wide bool) []string {
	sp, md := set.GetSpec(), set.GetMetadata()
	applied, total := 0, 0
	var not []string
	for _, rec := range set.GetStatus().GetClusters() {
		total++
		if manifest.AddonApplied(set, rec) {
			applied++
			continue
		}
		reason := conditions.Get(rec.GetConditions(), manifest.AddonConditionApplied).GetReason()
		not = append(not, rec.GetCluster()+" ("+orNone(reason)+")")
	}
	r := []string{md.GetName(), orNone(sp.GetMode()), strconv.Itoa(int(sp.GetOrder())), strconv.FormatBool(sp.GetBlocking()),
		fmt.Sprintf("%d/%d", applied, total), age(md.GetCreationTimestamp(), now)}
	if wide {
		r = append(r, selectorString(sp.GetClusterSelector()), orNone(sp.GetOnRemove()), strconv.FormatInt(md.GetGeneration(), 10),
			orNone(strings.Join(not, ", ")))
	}
	return r
}

// selectorString renders a label selector as kubectl does: a=b,c in (x,y);
// "<all clusters>" for an empty one.
func selectorString(sel *capnv1.LabelSelector) string {
	var parts []string
	for _, k := range sortedKeys(sel.GetMatchLabels()) {
		parts = append(parts, k+"="+sel.GetMatchLabels()[k])
	}
	for _, r := range sel.GetMatchExpressions() {
		switch r.GetOperator() {
		case manifest.SelectorIn:
			parts = append(parts, r.GetKey()+" in ("+strings.Join(r.GetValues(), ",")+")")
		case manifest.SelectorNotIn:
			parts = append(parts, r.GetKey()+" notin ("+strings.Join(r.GetValues(), ",")+")")
		case manifest.SelectorExists:
			parts = append(parts, r.GetKey())
		case manifest.SelectorDoesNotExist:
			parts = append(parts, "!"+r.GetKey())
		}
	}
	if len(parts) == 0 {
		return "<all clusters>"
	}
	return strings.Join(parts, ",")
}

// describeAddons writes a cluster's add-on records: one line per set.
func describeAddons(w io.Writer, recs []*capnv1.ClusterAddonStatus, now time.Time) {
	if len(recs) == 0 {
		return
	}
	fmt.Fprint(w, "\nAdd-ons:\n")
	rows := [][]string{{"  SET", "APPLIED", "REASON", "GENERATION", "OBJECTS", "LAST APPLIED", "MESSAGE"}}
	for _, r := range recs {
		c := conditions.Get(r.GetConditions(), manifest.AddonConditionApplied)
		set := r.GetAddonSet()
		if r.GetBlocking() {
			set += " (blocking)"
		}
		last := "never"
		if r.GetLastApplied() != nil {
			last = age(r.GetLastApplied(), now) + " ago"
		}
		gen := "-"
		if r.GetAppliedGeneration() > 0 {
			gen = strconv.FormatInt(r.GetAppliedGeneration(), 10)
		}
		rows = append(rows, []string{"  " + set, orNone(c.GetStatus()), c.GetReason(), gen, strconv.Itoa(len(r.GetObjects())), last, c.GetMessage()})
	}
	writeTable(w, rows)
}

// deleteAddonSets is capn delete addonset NAME...
func deleteAddonSets(ctx context.Context, e env, a apiFlags, names []string) int {
	const name = "capn delete"
	if len(names) == 0 {
		return reportError(e.stderr, name, nil, usagef("missing the add-on sets to delete: capn delete addonset NAME..."))
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	for _, n := range names {
		if _, err := s.c.DeleteAddonSet(ctx, n); err != nil {
			return s.fail(err)
		}
		fmt.Fprintf(e.stdout, "addonset/%s deleted\n", n)
	}
	return daemon.ExitOK
}

const addonSecretHelp = `
Stores Kubernetes objects with credentials (a cloud provider's Secret, a
CNI's token) sealed in capn's secrets bucket, as the add-on secret NAME: an
AddonSet names it in a manifest (spec.manifests[].secret: NAME) instead of
carrying it inline. The content is checked as an inline manifest is (each
document a Kubernetes object with apiVersion, kind and metadata.name) and
never given back by the API; a Reconcile set naming the secret is applied
again when it changes. Needs a token with the write and secrets scopes.

Examples:
  capn addon-secret set cloud-credentials -f cloud-secret.yaml
  capn addon-secret delete cloud-credentials
`

func cmdAddonSecret(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn addon-secret set NAME -f FILE|- | delete NAME", addonSecretHelp)
	var a apiFlags
	a.bind(fs)
	var file string
	fs.StringVar(&file, "f", "", "the objects' `file` (YAML or JSON), or - for standard input")
	fs.StringVar(&file, "filename", "", "`file`: same as -f")
	const name = "capn addon-secret"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if len(pos) != 2 || (pos[0] != "set" && pos[0] != "delete") {
		return reportError(e.stderr, name, nil, usagef("want set NAME -f FILE, or delete NAME"))
	}
	verb, secret := pos[0], pos[1]
	if !manifest.IsDNSLabel(secret) {
		return reportError(e.stderr, name, nil, usagef("%q is not a name: it must be a DNS-1123 label", secret))
	}
	var data []byte
	switch {
	case verb == "set" && file == "":
		return reportError(e.stderr, name, nil, usagef("-f is required: the objects' file, or - for standard input"))
	case verb == "delete" && file != "":
		return reportError(e.stderr, name, nil, usagef("-f goes with set"))
	case verb == "set":
		if data, err = readInput(e, file); err != nil {
			return reportError(e.stderr, name, nil, err)
		}
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if verb == "delete" {
		if err := s.c.DeleteAddonSecret(ctx, secret); err != nil {
			return s.fail(err)
		}
		fmt.Fprintf(e.stdout, "addon-secret/%s deleted\n", secret)
		return daemon.ExitOK
	}
	info, created, err := s.c.SetAddonSecret(ctx, secret, data)
	if err != nil {
		return s.fail(err)
	}
	what := "configured"
	if created {
		what = "created"
	}
	fmt.Fprintf(e.stdout, "addon-secret/%s %s (%s, hash %s)\n", secret, what, plural(info.Objects, "object"), info.Hash)
	return daemon.ExitOK
}

const bootstrapSecretHelp = `
Stores values machines' bootstrap files take their content from (a TLS key,
a registry credential) sealed in capn's secrets bucket, as the bootstrap
secret NAME: a file names one of its keys with
files[].secretRef: {name: NAME, key: KEY} instead of carrying content. Only
the bootstrapper reads it, when it renders a machine's bootstrap data
(itself sealed); a machine whose file names a secret or key that does not
exist waits for it (condition BootstrapReady, reason
BootstrapSecretNotFound). set replaces every key of the secret; the API
never gives the values back. Needs a token with the write and secrets
scopes.

Examples:
  capn bootstrap-secret set registry --from-file auth.json=./auth.json
  capn bootstrap-secret set tls --from-file tls.key=./key.pem --from-literal ca=...
  capn bootstrap-secret delete registry
`

// keyValues is a repeatable KEY=VALUE flag.
type keyValues []string

func (k *keyValues) String() string     { return strings.Join(*k, ",") }
func (k *keyValues) Set(v string) error { *k = append(*k, v); return nil }

func cmdBootstrapSecret(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn bootstrap-secret set NAME (--from-file KEY=FILE | --from-literal KEY=VALUE)... | delete NAME", bootstrapSecretHelp)
	var a apiFlags
	a.bind(fs)
	var files, literals keyValues
	fs.Var(&files, "from-file", "`KEY=FILE`: the key's value is the file's content (repeatable; FILE - is standard input)")
	fs.Var(&literals, "from-literal", "`KEY=VALUE`: the key's value (repeatable)")
	const name = "capn bootstrap-secret"
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	if len(pos) != 2 || (pos[0] != "set" && pos[0] != "delete") {
		return reportError(e.stderr, name, nil, usagef("want set NAME --from-file KEY=FILE, or delete NAME"))
	}
	verb, secret := pos[0], pos[1]
	if !manifest.IsDNSLabel(secret) {
		return reportError(e.stderr, name, nil, usagef("%q is not a name: it must be a DNS-1123 label", secret))
	}
	data := map[string][]byte{}
	switch {
	case verb == "set" && len(files)+len(literals) == 0:
		return reportError(e.stderr, name, nil, usagef("set needs at least one --from-file KEY=FILE or --from-literal KEY=VALUE"))
	case verb == "delete" && len(files)+len(literals) > 0:
		return reportError(e.stderr, name, nil, usagef("--from-file and --from-literal go with set"))
	}
	for _, kv := range append(append([]string{}, files...), literals...) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !manifest.IsSecretKey(k) {
			return reportError(e.stderr, name, nil, usagef("%q: want KEY=VALUE, KEY of letters, digits, '-', '_' or '.'", kv))
		}
		if _, dup := data[k]; dup {
			return reportError(e.stderr, name, nil, usagef("key %q given twice", k))
		}
		data[k] = []byte(v)
	}
	for _, kv := range files {
		k, file, _ := strings.Cut(kv, "=")
		if data[k], err = readInput(e, file); err != nil {
			return reportError(e.stderr, name, nil, fmt.Errorf("--from-file %s: %w", kv, err))
		}
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if verb == "delete" {
		if err := s.c.DeleteBootstrapSecret(ctx, secret); err != nil {
			return s.fail(err)
		}
		fmt.Fprintf(e.stdout, "bootstrap-secret/%s deleted\n", secret)
		return daemon.ExitOK
	}
	info, created, err := s.c.SetBootstrapSecret(ctx, secret, data)
	if err != nil {
		return s.fail(err)
	}
	what := "configured"
	if created {
		what = "created"
	}
	fmt.Fprintf(e.stdout, "bootstrap-secret/%s %s (%s: %s, hash %s)\n", secret, what, plural(len(info.Keys), "key"), strings.Join(info.Keys, ", "), info.Hash)
	return daemon.ExitOK
}
