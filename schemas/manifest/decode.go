package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v2"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// APIVersion and KindCluster identify a capn Cluster manifest.
const (
	APIVersion  = "capn.dev/v1alpha1"
	KindCluster = "Cluster"
)

var (
	// ErrEmpty is returned by Decode for input with no document.
	ErrEmpty = errors.New("manifest is empty")
	// ErrMultipleDocuments is returned by Decode for input with more than one
	// document; DecodeAll reads them all.
	ErrMultipleDocuments = errors.New("manifest has more than one document")
)

// Decode reads exactly one Cluster from YAML or JSON. Every unknown field and
// every value of the wrong type is reported with its path (errors.Join of
// *FieldError); a syntax error is returned as the parser gives it.
func Decode(data []byte) (*capnv1.Cluster, error) {
	docs, err := parseDocuments(data)
	if err != nil {
		return nil, err
	}
	switch len(docs) {
	case 0:
		return nil, ErrEmpty
	case 1:
		return decodeDocument(docs[0])
	default:
		return nil, fmt.Errorf("%w: found %d; use DecodeAll", ErrMultipleDocuments, len(docs))
	}
}

// DecodeAll reads every document of a YAML stream (separated by "---"), a
// sequence of JSON objects, or a JSON array of objects. Documents that are
// empty or only comments are skipped. Errors name their document:
// "document 2: spec.controlPlane.replica: unknown field".
func DecodeAll(data []byte) ([]*capnv1.Cluster, error) {
	docs, err := parseDocuments(data)
	if err != nil {
		return nil, err
	}
	out := make([]*capnv1.Cluster, 0, len(docs))
	var errs []error
	for i, doc := range docs {
		c, err := decodeDocument(doc)
		if err != nil {
			for _, e := range flatten(err) {
				errs = append(errs, fmt.Errorf("document %d: %w", i+1, e))
			}
			continue
		}
		out = append(out, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// flatten returns the errors an errors.Join holds, or err itself.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func decodeDocument(doc any) (*capnv1.Cluster, error) {
	top, ok := doc.(yaml.MapSlice)
	if !ok {
		return nil, &FieldError{Path: "(document)", Reason: "must be a mapping with apiVersion, kind, metadata and spec, not " + describe(doc)}
	}
	if err := checkKind(top); err != nil {
		return nil, err
	}
	c := &capnv1.Cluster{}
	f := &filler{}
	f.message(top, c.ProtoReflect(), "")
	if len(f.errs) > 0 {
		return nil, errors.Join(f.errs...)
	}
	return c, nil
}

// checkKind refuses a document that is plainly not a capn Cluster before its
// fields produce a page of unknown-field errors.
func checkKind(top yaml.MapSlice) error {
	var errs fieldErrors
	for _, it := range top {
		switch it.Key {
		case "apiVersion", "api_version":
			if s, ok := it.Value.(string); ok && s != APIVersion {
				hint := ""
				if strings.Contains(s, "cluster.x-k8s.io") {
					hint = " (this looks like a Cluster API manifest)"
				}
				errs.add("apiVersion", s, "unsupported: must be %s%s", APIVersion, hint)
			}
		case "kind":
			if s, ok := it.Value.(string); ok && s != KindCluster {
				hint := ""
				if s == KindAddonSet {
					hint = " (an AddonSet is applied through /v1/addonsets: capn apply sends it there)"
				}
				errs.add("kind", s, "unsupported: must be %s%s", KindCluster, hint)
			}
		}
	}
	return errors.Join(errs...)
}

// parseDocuments splits the input into documents, each a yaml.MapSlice (or
// whatever else the document holds, refused later). JSON is read with
// encoding/json because YAML 1.1 refuses tab-indented JSON.
func parseDocuments(data []byte) ([]any, error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n\ufeff")
	if len(trimmed) > 0 && (trimmed[0] == '{' || trimmed[0] == '[') {
		return parseJSON(trimmed)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []any
	for {
		var doc yaml.MapSlice
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			var te *yaml.TypeError
			if errors.As(err, &te) {
				return nil, fmt.Errorf("document %d: must be a mapping with apiVersion, kind, metadata and spec", len(docs)+1)
			}
			return nil, fmt.Errorf("parse manifest: %w", err)
		}
		if doc == nil {
			continue // an empty document, or one of comments only
		}
		docs = append(docs, doc)
	}
}

func parseJSON(data []byte) ([]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var docs []any
	for {
		v, err := readJSON(dec)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("parse manifest: %w", err)
		}
		if arr, ok := v.([]any); ok {
			docs = append(docs, arr...)
			continue
		}
		docs = append(docs, v)
	}
}

// readJSON reads one JSON value keeping the order of object keys, in the
// shapes the YAML decoder gives: yaml.MapSlice, []any, string, bool, nil,
// int64 or float64.
func readJSON(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			ms := yaml.MapSlice{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := readJSON(dec)
				if err != nil {
					return nil, unexpectedEOF(err)
				}
				ms = append(ms, yaml.MapItem{Key: k, Value: v})
			}
			_, err := dec.Token()
			return ms, unexpectedEOF(err)
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := readJSON(dec)
				if err != nil {
					return nil, unexpectedEOF(err)
				}
				arr = append(arr, v)
			}
			_, err := dec.Token()
			return arr, unexpectedEOF(err)
		}
		return nil, fmt.Errorf("unexpected %q", t)
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i, nil
		}
		f, err := t.Float64()
		return f, err
	default:
		return t, nil
	}
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
