package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/schemas/capi"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
	"github.com/capn-dev/capn/services/daemon"
)

const applyHelp = `
Creates or updates the clusters and add-on sets (kind AddonSet) the
manifests declare (YAML or JSON; several documents separated by "---", a
JSON array, a directory of *.yaml, *.yml and *.json files, several -f).
Each is reported as created, configured (its spec or labels changed) or
unchanged.

All or nothing: every document is first checked by the gateway with a
server-side dry run (against the stored cluster: update rules, immutable
fields, resourceVersion); only when every one passes is any applied.
Each refused document is named with its number in the input and its
cluster. A dry run is not a transaction: if an apply still fails (the
cluster changed in between), capn apply stops and says which documents
were applied and which not.

A Cluster API manifest is refused: convert it with capn import first.

With --wait, capn apply then waits until every cluster applied is ready — the
status has caught up with the spec just applied and the Ready condition is
True — showing machines ready out of desired, the cluster's phase and what
it is doing. On timeout it exits with 1 and says what blocks.

Examples:
  capn apply -f examples/demo-cluster.yaml --wait
  capn apply -f clusters/ --dry-run=server
  capn import -f capi.yaml | capn apply -f -
`

// Values of --dry-run, as kubectl's.
const (
	dryRunNone   = "none"
	dryRunServer = "server"
	dryRunClient = "client"
)

func cmdApply(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn apply -f FILE|DIR|- [-f ...] [-R] [--dry-run=none|server] [--wait] [--timeout DURATION]", applyHelp)
	var a apiFlags
	a.bind(fs)
	var wf waitFlags
	wf.bind(fs, "every cluster applied is ready")
	var in inputFlags
	in.bind(fs)
	dryRun := dryRunNone
	fs.StringVar(&dryRun, "dry-run", dryRunNone, "none applies; server has the gateway check every document and prints what would be applied, writing nothing")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	const name = "capn apply"
	if err := wantArgs(pos); err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	switch dryRun {
	case dryRunNone, dryRunServer:
	case dryRunClient:
		return reportError(e.stderr, name, nil, usagef("--dry-run=client is not supported: the rules that matter (update rules, immutable fields, resourceVersion) need the stored cluster; use --dry-run=server, which writes nothing"))
	default:
		return reportError(e.stderr, name, nil, usagef("--dry-run: must be none, server or client, got %q", dryRun))
	}
	if dryRun == dryRunServer && wf.wait {
		return reportError(e.stderr, name, nil, usagef("--wait has nothing to wait for with --dry-run=server: nothing is applied"))
	}
	docs, err := in.load(e)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	checked, refused, err := s.checkAll(ctx, docs, dryRun == dryRunServer)
	switch {
	case err != nil:
		return s.fail(err)
	case refused > 0:
		fmt.Fprintf(e.stderr, "%s: nothing was applied: %d of %s refused\n", name, refused, plural(len(docs), "document"))
		return daemon.ExitFailed
	}
	if dryRun == dryRunServer {
		for _, c := range checked {
			fmt.Fprintf(e.stdout, "%s %s (server dry run)\n", c.ref(), c.outcome())
		}
		return daemon.ExitOK
	}
	afterDryRun()
	done, ok := s.applyAll(ctx, checked)
	if !ok {
		return daemon.ExitFailed
	}
	if wf.wait {
		for _, d := range done {
			if d.addonSet || d.class {
				continue // a set or a class has no readiness of its own
			}
			if err := s.waitFor(ctx, d.name, untilReady, d.gen, wf.timeout); err != nil {
				return s.fail(err)
			}
		}
	}
	return daemon.ExitOK
}

// applyAll applies the documents that passed their dry run, in order,
// printing each outcome. It stops at the first failure, reports it and
// which documents were applied and which not, and returns false.
func (s *session) applyAll(ctx context.Context, checked []checked) ([]applyResult, bool) {
	var done []applyResult
	for i, c := range checked {
		res, err := s.applyChecked(ctx, c)
		if err == nil {
			fmt.Fprintf(s.e.stdout, "%s %s\n", res.ref(), res.outcome)
			done = append(done, res)
			continue
		}
		if len(checked) == 1 || !perDocument(err) {
			s.fail(err)
		} else {
			s.reportDocument(c.doc, err)
		}
		if len(checked) > 1 {
			why := "the gateway failed"
			if perDocument(err) {
				why = "the cluster changed in between"
			}
			fmt.Fprintf(s.e.stderr, "%s: document %d failed although every document passed the server-side dry run (a dry run is not a transaction: %s)\n", s.name, c.doc.num, why)
			fmt.Fprintf(s.e.stderr, "  applied:     %s\n", docList(checked[:i]))
			fmt.Fprintf(s.e.stderr, "  not applied: %s\n", docList(checked[i:]))
		}
		return done, false
	}
	return done, true
}

// afterDryRun runs between the dry runs and the applies: a test sets it to
// change a cluster in between, as another client could.
var afterDryRun = func() {}

// inputFlags are -f (repeatable) and -R, shared by apply and diff.
type inputFlags struct {
	files     fileList
	recursive bool
}

func (f *inputFlags) bind(fs *flagSet) {
	fs.Var(&f.files, "f", "manifest `file`, directory (its *.yaml, *.yml and *.json, sorted) or - for standard input; may be repeated")
	fs.Var(&f.files, "filename", "`file`: same as -f")
	fs.BoolVar(&f.recursive, "R", false, "with a directory: its subdirectories too")
	fs.BoolVar(&f.recursive, "recursive", false, "same as -R")
}

// fileList is a repeatable string flag.
type fileList []string

func (l *fileList) String() string     { return strings.Join(*l, ",") }
func (l *fileList) Set(v string) error { *l = append(*l, v); return nil }

// document is one manifest of the input.
type document struct {
	file string // where it came from, as given ("-": standard input)
	num  int    // 1-based, across the whole input
	data []byte
	// What the CLI can read of it (empty when it cannot: the gateway then
	// says what is wrong).
	apiVersion, kind, name string
	multiFile              bool // the input has several files: name the file
}

// label names a document in messages: "document 2 (cluster bad4)", with
// the file when the input has several.
func (d *document) label() string {
	what := "no metadata.name"
	switch {
	case d.isCAPI() && d.name != "":
		what = d.kind + " " + d.name
	case d.isCAPI():
		what = d.kind
	case d.isAddonSet() && d.name != "":
		what = "addonset " + d.name
	case d.isClass() && d.name != "":
		what = "clusterclass " + d.name
	case d.name != "":
		what = "cluster " + d.name
	}
	switch {
	case d.multiFile && d.file == "-":
		what += ", standard input"
	case d.multiFile:
		what += ", " + d.file
	}
	return fmt.Sprintf("document %d (%s)", d.num, what)
}

// isCAPI reports a Cluster API object: an apiVersion in cluster.x-k8s.io
// or one of its subgroups (controlplane., bootstrap., infrastructure., …).
func (d *document) isCAPI() bool {
	g, _, _ := strings.Cut(d.apiVersion, "/")
	return g == capi.GroupCore || strings.HasSuffix(g, "."+capi.GroupCore)
}

// isAddonSet reports a capn AddonSet (applied through /v1/addonsets).
func (d *document) isAddonSet() bool {
	return d.apiVersion == manifest.APIVersion && d.kind == manifest.KindAddonSet
}

// isClass reports a capn ClusterClass (applied through /v1/clusterclasses).
func (d *document) isClass() bool {
	return d.apiVersion == manifest.APIVersion && d.kind == manifest.KindClusterClass
}

// key identifies what a document declares, for the declared-twice check.
func (d *document) key() string {
	if d.isAddonSet() {
		return "addonset/" + d.name
	}
	if d.isClass() {
		return "clusterclass/" + d.name
	}
	return "cluster/" + d.name
}

// load reads every -f into documents, numbered across the whole input.
func (f *inputFlags) load(e env) ([]*document, error) {
	if len(f.files) == 0 {
		return nil, usagef("-f is required: a manifest file, a directory, or - for standard input")
	}
	var files []string
	stdin := false
	for _, in := range f.files {
		if in == "-" {
			if stdin {
				return nil, usagef("-f - is given twice: standard input can be read once")
			}
			stdin = true
			files = append(files, in)
			continue
		}
		st, err := os.Stat(in)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, in)
			continue
		}
		found, err := manifestFiles(in, f.recursive)
		if err != nil {
			return nil, err
		}
		if len(found) == 0 {
			hint := ""
			if !f.recursive {
				hint = " (-R reads its subdirectories too)"
			}
			return nil, fmt.Errorf("%s: a directory with no *.yaml, *.yml or *.json file in it%s", in, hint)
		}
		files = append(files, found...)
	}
	var docs []*document
	for _, file := range files {
		data, err := readInput(e, file)
		if err != nil {
			return nil, err
		}
		split, err := splitDocuments(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		for _, b := range split {
			d := &document{file: file, num: len(docs) + 1, data: b, multiFile: len(files) > 1}
			d.apiVersion, d.kind, d.name = manifestHeader(b)
			docs = append(docs, d)
		}
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("%s: no manifest in it", strings.Join(files, ", "))
	}
	return docs, nil
}

// manifestFiles lists a directory's *.yaml, *.yml and *.json files,
// sorted; with recursive, its subdirectories' too (in lexical order).
func manifestFiles(dir string, recursive bool) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != dir && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml", ".json":
			out = append(out, path)
		}
		return nil
	})
	return out, err
}

// checked is a document that passed the server-side dry run: the cluster
// (or add-on set) as it would be stored, whether it would be created, and
// (when asked) as stored now.
type checked struct {
	doc     *document
	wouldBe *capnv1.Cluster
	created bool
	current *capnv1.Cluster // nil when it does not exist or was not read
	// An add-on set's document: wouldBeSet and currentSet instead.
	wouldBeSet, currentSet *capnv1.AddonSet
	// A class's document: wouldBeClass and currentClass instead.
	wouldBeClass, currentClass *capnv1.ClusterClass
}

// ref is kind/name: cluster/demo, addonset/cni.
func (c checked) ref() string {
	if c.wouldBeSet != nil {
		return "addonset/" + c.wouldBeSet.GetMetadata().GetName()
	}
	if c.wouldBeClass != nil {
		return "clusterclass/" + c.wouldBeClass.GetMetadata().GetName()
	}
	return "cluster/" + c.wouldBe.GetMetadata().GetName()
}

// outcome is what applying it would do: created, configured or unchanged.
func (c checked) outcome() string {
	switch {
	case c.created:
		return "created"
	case c.current != nil && sameStored(c.current, c.wouldBe):
		return "unchanged"
	case c.currentSet != nil && sameStoredSet(c.currentSet, c.wouldBeSet):
		return "unchanged"
	case c.wouldBeClass != nil && c.currentClass != nil && c.currentClass.GetStatus().GetRevision() == c.wouldBeClass.GetStatus().GetRevision():
		return "unchanged"
	}
	return "configured"
}

// sameStoredSet compares two add-on sets as stored: status and
// resourceVersion aside.
func sameStoredSet(a, b *capnv1.AddonSet) bool {
	a, b = proto.CloneOf(a), proto.CloneOf(b)
	for _, s := range []*capnv1.AddonSet{a, b} {
		s.Status = nil
		if s.Metadata != nil {
			s.Metadata.ResourceVersion = ""
		}
	}
	return proto.Equal(a, b)
}

// sameStored compares two clusters as stored: status and resourceVersion
// aside.
func sameStored(a, b *capnv1.Cluster) bool {
	a, b = proto.CloneOf(a), proto.CloneOf(b)
	for _, c := range []*capnv1.Cluster{a, b} {
		c.Status = nil
		if c.Metadata != nil {
			c.Metadata.ResourceVersion = ""
		}
	}
	return proto.Equal(a, b)
}

// checkAll checks every document before anything is applied: Cluster API
// manifests and clusters declared twice are refused here, the rest by a
// server-side dry run each. withCurrent also reads each stored cluster
// (for diff and --dry-run=server). Every refused document is reported, one
// line per bad field naming the document, and counted in refused. fatal is
// an error to report as it is: one that is not about a document (the
// gateway unreachable, the token refused), or the refusal of the only
// document.
func (s *session) checkAll(ctx context.Context, docs []*document, withCurrent bool) (out []checked, refused int, fatal error) {
	seen := map[string]*document{}
	for _, d := range docs {
		var err error
		switch first := seen[d.key()]; {
		case d.isCAPI():
			err = fmt.Errorf("this is a Cluster API manifest: run capn import -f %s", d.file)
		case first != nil:
			kind, _, _ := strings.Cut(d.key(), "/")
			err = fmt.Errorf("%s %s is also in %s: declare each %s once", kind, d.name, first.label(), kind)
		}
		if err == nil {
			if d.name != "" {
				seen[d.key()] = d
			}
			var c checked
			c, err = s.check(ctx, d, withCurrent)
			if err == nil {
				out = append(out, c)
				continue
			}
			if !perDocument(err) {
				return nil, 0, err
			}
		}
		if len(docs) == 1 {
			return nil, 0, err
		}
		s.reportDocument(d, err)
		refused++
	}
	return out, refused, nil
}

// check dry-runs one document (and reads the stored cluster first when
// withCurrent).
func (s *session) check(ctx context.Context, d *document, withCurrent bool) (checked, error) {
	c := checked{doc: d}
	if d.isClass() {
		if withCurrent && d.name != "" {
			cur, err := s.c.Class(ctx, d.name, 0)
			switch {
			case err == nil:
				c.currentClass = cur
			case !client.IsNotFound(err):
				return c, err
			}
		}
		var err error
		c.wouldBeClass, c.created, err = s.c.ApplyClass(ctx, d.data, client.DryRun)
		return c, err
	}
	if d.isAddonSet() {
		if withCurrent && d.name != "" {
			cur, err := s.c.AddonSet(ctx, d.name)
			switch {
			case err == nil:
				c.currentSet = cur
			case !client.IsNotFound(err):
				return c, err
			}
		}
		var err error
		c.wouldBeSet, c.created, err = s.c.ApplyAddonSet(ctx, d.data, client.DryRun)
		return c, err
	}
	if withCurrent && d.name != "" {
		cur, err := s.c.Get(ctx, d.name)
		switch {
		case err == nil:
			c.current = cur
		case !client.IsNotFound(err):
			return c, err
		}
	}
	var err error
	c.wouldBe, c.created, err = s.c.Apply(ctx, d.data, client.DryRun)
	return c, err
}

// perDocument reports an error that is about one document (the gateway
// refused it), not about the whole run (unreachable, token refused, rate
// limited, gateway failing): those stop at once.
func perDocument(err error) bool {
	switch client.StatusCode(err) {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge,
		http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// reportDocument prints a refusal of one document: a line per bad field,
// each naming the document.
func (s *session) reportDocument(d *document, err error) {
	var ce *client.Error
	if !errors.As(err, &ce) {
		fmt.Fprintf(s.e.stderr, "%s: %s: %v\n", s.name, d.label(), err)
		return
	}
	if len(ce.Problem.Errors) == 0 {
		line := problemTitle(ce)
		if ce.Problem.Detail != "" {
			line += ": " + ce.Problem.Detail
		}
		fmt.Fprintf(s.e.stderr, "%s: %s: %s\n", s.name, d.label(), line)
		return
	}
	for _, f := range ce.Problem.Errors {
		fmt.Fprintf(s.e.stderr, "%s: %s: %s\n", s.name, d.label(), fieldLine(f))
	}
}

// docList names documents for the report of a failed apply: "document 1
// (cluster a), document 2 (cluster b)", or "none".
func docList(cs []checked) string {
	if len(cs) == 0 {
		return "none"
	}
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.doc.label()
	}
	return strings.Join(names, ", ")
}

// applyResult says what an apply did.
type applyResult struct {
	name, outcome string // created, configured, unchanged
	gen           int64
	addonSet      bool
	class         bool
}

func (r applyResult) ref() string {
	if r.addonSet {
		return "addonset/" + r.name
	}
	if r.class {
		return "clusterclass/" + r.name
	}
	return "cluster/" + r.name
}

// applyChecked applies a document that passed its dry run. Whether an
// update changed anything is read from the resourceVersion of the dry run
// and of the apply (the gateway writes nothing for an unchanged cluster).
func (s *session) applyChecked(ctx context.Context, c checked) (applyResult, error) {
	if c.wouldBeClass != nil {
		out, created, err := s.c.ApplyClass(ctx, c.doc.data)
		if err != nil {
			return applyResult{}, err
		}
		md := out.GetMetadata()
		res := applyResult{name: md.GetName(), outcome: "configured", gen: md.GetGeneration(), class: true}
		switch {
		case created:
			res.outcome = "created"
		case c.wouldBeClass.GetMetadata().GetResourceVersion() == md.GetResourceVersion():
			res.outcome = "unchanged"
		}
		return res, nil
	}
	if c.wouldBeSet != nil {
		out, created, err := s.c.ApplyAddonSet(ctx, c.doc.data)
		if err != nil {
			return applyResult{}, err
		}
		md := out.GetMetadata()
		res := applyResult{name: md.GetName(), outcome: "configured", gen: md.GetGeneration(), addonSet: true}
		switch {
		case created:
			res.outcome = "created"
		case c.wouldBeSet.GetMetadata().GetResourceVersion() == md.GetResourceVersion():
			res.outcome = "unchanged"
		}
		return res, nil
	}
	out, created, err := s.c.Apply(ctx, c.doc.data)
	if err != nil {
		return applyResult{}, err
	}
	md := out.GetMetadata()
	res := applyResult{name: md.GetName(), outcome: "configured", gen: md.GetGeneration()}
	switch {
	case created:
		res.outcome = "created"
	case c.wouldBe.GetMetadata().GetResourceVersion() == md.GetResourceVersion():
		res.outcome = "unchanged"
	}
	return res, nil
}

// readInput reads a file, or standard input for "-".
func readInput(e env, file string) ([]byte, error) {
	if file == "-" {
		if e.stdin == nil {
			return nil, errors.New("no standard input")
		}
		return io.ReadAll(e.stdin)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// splitDocuments cuts a YAML stream (documents separated by "---"), a
// sequence of JSON objects or a JSON array into one manifest each, so the
// gateway, which takes one cluster per request, gets them one by one.
// Empty documents are skipped. YAML documents are re-rendered with their
// keys in order.
func splitDocuments(data []byte) ([][]byte, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		var out [][]byte
		for {
			var raw json.RawMessage
			err := dec.Decode(&raw)
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			if err != nil {
				return nil, fmt.Errorf("parse JSON: %w", err)
			}
			if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] == '[' {
				var items []json.RawMessage
				if err := json.Unmarshal(t, &items); err != nil {
					return nil, fmt.Errorf("parse JSON: %w", err)
				}
				for _, it := range items {
					out = append(out, it)
				}
				continue
			}
			out = append(out, raw)
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out [][]byte
	for i := 1; ; i++ {
		var doc yaml.MapSlice
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			var te *yaml.TypeError
			if errors.As(err, &te) {
				return nil, fmt.Errorf("document %d: must be a mapping with apiVersion, kind, metadata and spec", i)
			}
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if doc == nil {
			continue
		}
		b, err := yaml.Marshal(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		out = append(out, b)
	}
}

// manifestHeader is the apiVersion, kind and metadata.name of a manifest,
// each "" when the CLI cannot read it (the gateway then says what is
// wrong).
func manifestHeader(doc []byte) (apiVersion, kind, name string) {
	var m struct {
		APIVersion string `json:"apiVersion" yaml:"apiVersion"`
		Kind       string `json:"kind" yaml:"kind"`
		Metadata   struct {
			Name string `json:"name" yaml:"name"`
		} `json:"metadata" yaml:"metadata"`
	}
	if t := bytes.TrimSpace(doc); len(t) > 0 && t[0] == '{' {
		_ = json.Unmarshal(t, &m)
	} else {
		_ = yaml.Unmarshal(doc, &m)
	}
	return m.APIVersion, m.Kind, m.Metadata.Name
}
