package cli

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		args    []string
		wantPos []string
		wantO   string
		wantW   bool
	}{
		{args: []string{"clusters", "-o", "json"}, wantPos: []string{"clusters"}, wantO: "json"},
		{args: []string{"-o", "json", "clusters"}, wantPos: []string{"clusters"}, wantO: "json"},
		{args: []string{"machines", "m-1", "--watch", "--output=yaml"}, wantPos: []string{"machines", "m-1"}, wantO: "yaml", wantW: true},
		{args: []string{"clusters", "--", "-o", "x"}, wantPos: []string{"clusters", "-o", "x"}},
		{args: []string{"-", "-watch"}, wantPos: []string{"-"}, wantW: true},
		{args: nil},
	}
	for _, tt := range tests {
		e, _, _ := testEnv(nil)
		fs := newFlags(e, "capn t", "")
		o := fs.String("o", "", "")
		fs.StringVar(o, "output", "", "")
		w := fs.Bool("watch", false, "")
		pos, err := parseArgs(fs, tt.args)
		if err != nil || !slices.Equal(pos, tt.wantPos) || *o != tt.wantO || *w != tt.wantW {
			t.Errorf("parseArgs(%q) = %q, -o %q, -w %v, %v", tt.args, pos, *o, *w, err)
		}
	}
	e, _, _ := testEnv(nil)
	if _, err := parseArgs(newFlags(e, "capn t", ""), []string{"clusters", "--nope"}); err == nil {
		t.Error("an unknown flag after an argument was accepted")
	}
	var ue usageError
	if err := wantArgs([]string{"a", "b"}, "NAME"); !errors.As(err, &ue) || ue.msg != `unexpected argument "b"` {
		t.Errorf("wantArgs: %v", err)
	}
	if err := wantArgs(nil, "cluster", "NAME"); err == nil || err.Error() != "missing cluster and NAME" {
		t.Errorf("wantArgs: %v", err)
	}
}

func TestSplitDocuments(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []string // each document's metadata.name
		wantErr string
	}{
		{name: "one YAML document", in: "apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: a}\n", want: []string{"a"}},
		{name: "a YAML stream with empty documents", in: "---\n# nothing\n---\nmetadata: {name: a}\n---\n---\nmetadata:\n  name: b\n", want: []string{"a", "b"}},
		{name: "JSON objects", in: `{"metadata":{"name":"a"}} {"metadata":{"name":"b"}}`, want: []string{"a", "b"}},
		{name: "a JSON array", in: ` [{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]`, want: []string{"a", "b"}},
		{name: "nothing", in: "\n# just a comment\n"},
		{name: "a list, not a mapping", in: "- a\n", wantErr: "document 1: must be a mapping with apiVersion, kind, metadata and spec"},
		{name: "bad YAML in the second document", in: "metadata: {name: a}\n---\nmetadata: [\n", wantErr: "document 2: yaml:"},
		{name: "bad JSON", in: `{"metadata":`, wantErr: "parse JSON:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := splitDocuments([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, d := range docs {
				_, _, name := manifestHeader(d)
				names = append(names, name)
			}
			if !slices.Equal(names, tt.want) {
				t.Errorf("documents named %q, want %q", names, tt.want)
			}
		})
	}
}
