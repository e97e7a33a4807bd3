package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/template"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Output formats of -o.
const (
	outTable = ""
	outWide  = "wide"
	outJSON  = "json"
	outYAML  = "yaml"
	outName  = "name"
)

// outGoTemplate prefixes -o go-template=TEMPLATE: a text/template run on
// the object (or the list) as its JSON decodes, as kubectl's.
const outGoTemplate = "go-template="

func checkOutput(o string) error {
	switch o {
	case outTable, outWide, outJSON, outYAML, outName:
		return nil
	case "go-template":
		return usagef("-o go-template needs its template after =, e.g. -o go-template='{{.metadata.name}}'")
	}
	if t, ok := strings.CutPrefix(o, outGoTemplate); ok {
		_, err := parseGoTemplate(t)
		return err
	}
	return usagef("-o %q: must be wide, yaml, json, name or go-template=TEMPLATE", o)
}

// parseGoTemplate parses -o go-template's template; its errors say where
// (template: -o go-template:1: unexpected "}" in operand).
func parseGoTemplate(t string) (*template.Template, error) {
	if strings.TrimSpace(t) == "" {
		return nil, usagef("-o go-template= is empty: give a template, e.g. -o go-template='{{.metadata.name}}'")
	}
	tmpl, err := template.New("-o go-template").Parse(t)
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return tmpl, nil
}

// execGoTemplate runs tmpl on JSON decoded to maps, slices, strings,
// bools and numbers (as written: 3, not 3e+00).
func execGoTemplate(w io.Writer, tmpl *template.Template, j []byte, what string) error {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if err := tmpl.Execute(w, v); err != nil {
		return fmt.Errorf("-o go-template on %s: %w", what, err)
	}
	return nil
}

// table lays out rows in columns the way kubectl does: each column as
// wide as its widest cell (in runes: the tree's box-drawing characters
// are one column each), three spaces apart. Widths are fixed by the
// rows it was made with, so rows printed later (watch) line up too; a
// wider cell printed later pushes the rest of its row right.
type table struct{ widths []int }

func newTable(rows ...[]string) *table {
	t := &table{}
	for _, r := range rows {
		t.fit(r)
	}
	return t
}

func (t *table) fit(r []string) {
	for i, c := range r {
		if i >= len(t.widths) {
			t.widths = append(t.widths, 0)
		}
		t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
	}
}

// line renders one row, without trailing spaces.
func (t *table) line(r []string) string {
	var b strings.Builder
	for i, c := range r {
		b.WriteString(c)
		if i < len(r)-1 && i < len(t.widths) {
			b.WriteString(strings.Repeat(" ", max(t.widths[i]-utf8.RuneCountInString(c), 0)+3))
		}
	}
	return strings.TrimRight(b.String(), " ") + "\n"
}

// write prints the rows (header first) as a table.
func writeTable(w io.Writer, rows [][]string) {
	t := newTable(rows...)
	for _, r := range rows {
		io.WriteString(w, t.line(r))
	}
}

// age renders how long ago t was the way kubectl does: 45s, 3m12s, 5h,
// 2d3h; "<unknown>" without a time.
func age(t *timestamppb.Timestamp, now time.Time) string {
	if t == nil || !t.IsValid() || t.AsTime().IsZero() {
		return "<unknown>"
	}
	return humanDuration(now.Sub(t.AsTime()))
}

// humanDuration follows k8s.io/apimachinery's duration.HumanDuration.
func humanDuration(d time.Duration) string {
	if d < -time.Second {
		return "<invalid>"
	}
	if d < 0 {
		d = 0
	}
	s := int(d.Seconds())
	switch {
	case s < 120:
		return fmt.Sprintf("%ds", s)
	case d < 10*time.Minute:
		if s%60 == 0 {
			return fmt.Sprintf("%dm", s/60)
		}
		return fmt.Sprintf("%dm%ds", s/60, s%60)
	case d < 3*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 8*time.Hour:
		h := int(d.Hours())
		if m := int(d.Minutes()) % 60; m > 0 {
			return fmt.Sprintf("%dh%dm", h, m)
		}
		return fmt.Sprintf("%dh", h)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	case d < 8*24*time.Hour:
		days, h := int(d.Hours())/24, int(d.Hours())%24
		if h > 0 {
			return fmt.Sprintf("%dd%dh", days, h)
		}
		return fmt.Sprintf("%dd", days)
	case d < 2*365*24*time.Hour:
		return fmt.Sprintf("%dd", int(d.Hours())/24)
	}
	return fmt.Sprintf("%dy", int(d.Hours())/24/365)
}

// orNone shows an empty cell as kubectl does.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// objectJSON is the protojson form of a Cluster, Machine, AddonSet or
// ClusterClass with its apiVersion and kind first, as Kubernetes objects
// have them.
func objectJSON(m proto.Message) (json.RawMessage, error) {
	var kind string
	switch v := m.(type) {
	case *capnv1.Cluster:
		if v.GetApiVersion() == "" || v.GetKind() == "" {
			v = proto.Clone(v).(*capnv1.Cluster)
			v.ApiVersion, v.Kind = api.APIVersion, api.KindCluster
		}
		return protojson.Marshal(v) // api_version and kind are its first fields
	case *capnv1.Machine:
		kind = api.KindMachine
	case *capnv1.AddonSet:
		if v.GetApiVersion() == "" || v.GetKind() == "" {
			v = proto.CloneOf(v)
			v.ApiVersion, v.Kind = api.APIVersion, api.KindAddonSet
		}
		return protojson.Marshal(v)
	case *capnv1.ClusterClass:
		if v.GetApiVersion() == "" || v.GetKind() == "" {
			v = proto.CloneOf(v)
			v.ApiVersion, v.Kind = api.APIVersion, api.KindClusterClass
		}
		return protojson.Marshal(v)
	default:
		return nil, fmt.Errorf("cannot print %T", m)
	}
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	head := fmt.Sprintf(`{"apiVersion":%q,"kind":%q`, api.APIVersion, kind)
	body := bytes.TrimSpace(b)
	if rest := bytes.TrimSpace(body[1:]); len(rest) > 0 && rest[0] != '}' {
		head += ","
	}
	return json.RawMessage(head + string(body[1:])), nil
}

// listJSON is a Kubernetes-style list of items.
func listJSON(kind string, items []json.RawMessage) ([]byte, error) {
	if items == nil {
		items = []json.RawMessage{}
	}
	return encodeJSON(struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Items      []json.RawMessage `json:"items"`
	}{api.APIVersion, kind, items})
}

// encodeJSON indents v with four spaces, as kubectl does, without HTML
// escapes.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "    ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// encodeJSONLine is v as one line of JSON, without HTML escapes.
func encodeJSONLine(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// jsonToYAML re-renders JSON as YAML, keeping the order of keys.
func jsonToYAML(j []byte) ([]byte, error) {
	var v yaml.MapSlice
	if err := yaml.Unmarshal(j, &v); err != nil {
		return nil, fmt.Errorf("render YAML: %w", err)
	}
	return yaml.Marshal(v)
}

// printObjects prints a list (or, with single, one object) as JSON, YAML
// or names; tables are the callers'.
func printObjects(w io.Writer, format, listKind string, single bool, objs []proto.Message) error {
	if format == outName {
		for _, o := range objs {
			fmt.Fprintln(w, nameOf(o))
		}
		return nil
	}
	items := make([]json.RawMessage, 0, len(objs))
	for _, o := range objs {
		b, err := objectJSON(o)
		if err != nil {
			return err
		}
		items = append(items, b)
	}
	var out []byte
	var err error
	if single && len(items) == 1 {
		out, err = encodeJSON(items[0])
	} else {
		out, err = listJSON(listKind, items)
	}
	if err != nil {
		return err
	}
	if t, ok := strings.CutPrefix(format, outGoTemplate); ok {
		tmpl, err := parseGoTemplate(t)
		if err != nil {
			return err
		}
		what := "the list"
		if single && len(objs) == 1 {
			what = nameOf(objs[0])
		}
		return execGoTemplate(w, tmpl, out, what)
	}
	if format == outYAML {
		if out, err = jsonToYAML(out); err != nil {
			return err
		}
	}
	_, err = w.Write(out)
	return err
}

// nameOf is "cluster/demo" or "machine/demo-md-0-x".
func nameOf(m proto.Message) string {
	switch v := m.(type) {
	case *capnv1.Cluster:
		return "cluster/" + v.GetMetadata().GetName()
	case *capnv1.Machine:
		return "machine/" + v.GetMetadata().GetName()
	case *capnv1.AddonSet:
		return "addonset/" + v.GetMetadata().GetName()
	case *capnv1.ClusterClass:
		return "clusterclass/" + v.GetMetadata().GetName()
	}
	return fmt.Sprintf("%T", m)
}
