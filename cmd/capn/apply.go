package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v2"

	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/services/runtime"
)

const applyHelp = `
Creates or updates the clusters a manifest declares (YAML or JSON; several
documents separated by "---" are applied one after another). Each is
reported as created, configured (its spec or labels changed) or unchanged.

With --wait, capn apply then waits until every cluster is ready — the
status has caught up with the spec just applied and the Ready condition is
True — showing machines ready out of desired, the cluster's phase and what
it is doing. On timeout it exits with 1 and says what blocks.

Examples:
  capn apply -f examples/demo-cluster.yaml --wait
  capn import -f capi.yaml | capn apply -f -
`

func cmdApply(ctx context.Context, e env, args []string) int {
	fs := newFlags(e, "capn apply -f FILE|- [--wait] [--timeout DURATION]", applyHelp)
	var a apiFlags
	a.bind(fs)
	var wf waitFlags
	wf.bind(fs, "every cluster applied is ready")
	var file string
	fs.StringVar(&file, "f", "", "manifest `file`, or - for standard input")
	fs.StringVar(&file, "filename", "", "`file`: same as -f")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return exitFor(err)
	}
	const name = "capn apply"
	if err := wantArgs(pos); err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	if file == "" {
		return reportError(e.stderr, name, nil, usagef("-f is required: a manifest file, or - for standard input"))
	}
	data, err := readInput(e, file)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	docs, err := splitDocuments(data)
	if err != nil {
		return reportError(e.stderr, name, nil, fmt.Errorf("%s: %w", file, err))
	}
	if len(docs) == 0 {
		return reportError(e.stderr, name, nil, fmt.Errorf("%s: no manifest in it", file))
	}
	s, err := a.connect(e, name)
	if err != nil {
		return reportError(e.stderr, name, nil, err)
	}
	type applied struct {
		name string
		gen  int64
	}
	var done []applied
	for i, doc := range docs {
		res, err := s.apply(ctx, doc)
		if err != nil {
			if len(docs) > 1 {
				err = fmt.Errorf("document %d: %w", i+1, err)
			}
			return s.fail(err)
		}
		fmt.Fprintf(e.stdout, "cluster/%s %s\n", res.name, res.outcome)
		done = append(done, applied{res.name, res.gen})
	}
	if wf.wait {
		for _, d := range done {
			if err := s.waitFor(ctx, d.name, untilReady, d.gen, wf.timeout); err != nil {
				return s.fail(err)
			}
		}
	}
	return runtime.ExitOK
}

// applyResult says what an apply did.
type applyResult struct {
	name, outcome string // created, configured, unchanged
	gen           int64
}

// apply sends one manifest. Whether an update changed anything is read from
// the resourceVersion before and after (the gateway writes nothing for an
// unchanged cluster).
func (s *session) apply(ctx context.Context, doc []byte) (applyResult, error) {
	before := ""
	if name := manifestName(doc); name != "" {
		c, err := s.c.Get(ctx, name)
		switch {
		case err == nil:
			before = c.GetMetadata().GetResourceVersion()
		case !client.IsNotFound(err):
			return applyResult{}, err
		}
	}
	c, created, err := s.c.Apply(ctx, doc)
	if err != nil {
		return applyResult{}, err
	}
	md := c.GetMetadata()
	res := applyResult{name: md.GetName(), outcome: "configured", gen: md.GetGeneration()}
	switch {
	case created:
		res.outcome = "created"
	case before != "" && before == md.GetResourceVersion():
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

// manifestName is metadata.name of a manifest, or "" when it has none the
// CLI can read (the gateway then says what is wrong).
func manifestName(doc []byte) string {
	var m struct {
		Metadata struct {
			Name string `json:"name" yaml:"name"`
		} `json:"metadata" yaml:"metadata"`
	}
	if t := bytes.TrimSpace(doc); len(t) > 0 && t[0] == '{' {
		_ = json.Unmarshal(t, &m)
	} else {
		_ = yaml.Unmarshal(doc, &m)
	}
	return m.Metadata.Name
}
