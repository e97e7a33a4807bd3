package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// The decoder before issue 23 (document → normalised tree → JSON →
// protojson), kept as the reference the single decode is checked against.

func refDecodeDocument(doc any) (*capnv1.Cluster, error) {
	top, ok := doc.(yaml.MapSlice)
	if !ok {
		return nil, &FieldError{Path: "(document)", Reason: "must be a mapping with apiVersion, kind, metadata and spec, not " + describe(doc)}
	}
	if err := checkKind(top); err != nil {
		return nil, err
	}
	c := &capnv1.Cluster{}
	n := &refNormalizer{}
	tree := n.message(top, c.ProtoReflect().Descriptor(), "")
	if len(n.errs) > 0 {
		return nil, errors.Join(n.errs...)
	}
	j, err := json.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(j, c); err != nil {
		return nil, fmt.Errorf("decode manifest: %w", err)
	}
	return c, nil
}

// refNormalizer walks a decoded document along the protobuf descriptor of the
// message it should become. It reports unknown fields and wrong types with
// their paths (protojson's own errors name only a byte offset) and returns a
// tree protojson accepts: JSON names, Go durations rewritten as "900s",
// numbers in string fields as strings (maxSurge: 1).
type refNormalizer struct {
	errs fieldErrors
}

func (n *refNormalizer) message(v any, md protoreflect.MessageDescriptor, p path) any {
	switch md.FullName() {
	case durationName:
		return n.duration(v, p)
	case timestampName:
		s, ok := v.(string)
		if !ok {
			n.errs.add(p, nil, "expected a timestamp such as \"2025-01-02T15:04:05Z\", got %s", describe(v))
			return nil
		}
		if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
			n.errs.add(p, s, "must be an RFC 3339 timestamp such as \"2025-01-02T15:04:05Z\"")
			return nil
		}
		return s
	}
	ms, ok := v.(yaml.MapSlice)
	if !ok {
		n.errs.add(p, nil, "expected an object, got %s", describe(v))
		return nil
	}
	out := make(map[string]any, len(ms))
	fields := md.Fields()
	for _, it := range ms {
		key := fmt.Sprint(it.Key) // YAML 1.1 reads keys such as y or on as booleans
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		fp := p.child(key)
		if fd == nil {
			n.errs.add(fp, nil, "unknown field%s", suggest(key, fields))
			continue
		}
		name := fd.JSONName()
		if _, dup := out[name]; dup {
			n.errs.add(fp, nil, "duplicate field")
			continue
		}
		if it.Value == nil {
			out[name] = nil // protojson treats null as unset
			continue
		}
		out[name] = n.field(it.Value, fd, fp)
	}
	return out
}

func (n *refNormalizer) field(v any, fd protoreflect.FieldDescriptor, p path) any {
	switch {
	case fd.IsMap():
		ms, ok := v.(yaml.MapSlice)
		if !ok {
			n.errs.add(p, nil, "expected a map of %s, got %s", kindName(fd.MapValue()), describe(v))
			return nil
		}
		out := make(map[string]any, len(ms))
		for _, it := range ms {
			k := fmt.Sprint(it.Key)
			kp := p.key(k)
			if _, dup := out[k]; dup {
				n.errs.add(kp, nil, "duplicate key")
				continue
			}
			if it.Value == nil {
				n.errs.add(kp, nil, "expected %s, got null", kindName(fd.MapValue()))
				continue
			}
			out[k] = n.single(it.Value, fd.MapValue(), kp)
		}
		return out
	case fd.IsList():
		arr, ok := v.([]any)
		if !ok {
			n.errs.add(p, nil, "expected a list of %s, got %s", kindName(fd), describe(v))
			return nil
		}
		out := make([]any, len(arr))
		for i, e := range arr {
			if e == nil {
				n.errs.add(p.index(i), nil, "expected %s, got null", kindName(fd))
				continue
			}
			out[i] = n.single(e, fd, p.index(i))
		}
		return out
	default:
		return n.single(v, fd, p)
	}
}

// single normalizes one value of fd's kind (a list element, a map value or a
// singular field).
func (n *refNormalizer) single(v any, fd protoreflect.FieldDescriptor, p path) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return n.message(v, fd.Message(), p)
	case protoreflect.StringKind, protoreflect.BytesKind:
		switch v := v.(type) {
		case string:
			return v
		case int, int64, uint64:
			return fmt.Sprint(v) // maxSurge: 1 means "1"
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		case bool:
			n.errs.add(p, v, "expected a string, got a boolean: quote it (\"%t\")", v)
		default:
			n.errs.add(p, nil, "expected a string, got %s", describe(v))
		}
		return nil
	case protoreflect.BoolKind:
		if b, ok := v.(bool); ok {
			return b
		}
		n.errs.add(p, nil, "expected true or false, got %s", describe(v))
		return nil
	case protoreflect.EnumKind:
		switch v.(type) {
		case string, int, int64:
			return v
		}
		n.errs.add(p, nil, "expected an enum name, got %s", describe(v))
		return nil
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		switch v := v.(type) {
		case int, int64, uint64, float64:
			return v
		}
		n.errs.add(p, nil, "expected a number, got %s", describe(v))
		return nil
	default: // the integer kinds
		return n.integer(v, fd, p)
	}
}

func (n *refNormalizer) integer(v any, fd protoreflect.FieldDescriptor, p path) any {
	var (
		i  int64
		ok = true
	)
	switch x := v.(type) {
	case int:
		i = int64(x)
	case int64:
		i = x
	case uint64:
		if x > math.MaxInt64 {
			ok = false
		}
		i = int64(x)
	case float64:
		i, ok = int64(x), x == math.Trunc(x) && math.Abs(x) < 1<<62
	case string:
		var err error
		i, err = strconv.ParseInt(x, 10, 64)
		ok = err == nil
	default:
		ok = false
	}
	if !ok {
		n.errs.add(p, nil, "expected an integer, got %s", describe(v))
		return nil
	}
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	switch fd.Kind() {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		lo, hi = math.MinInt32, math.MaxInt32
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		lo, hi = 0, math.MaxUint32
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		lo = 0
	}
	if i < lo || i > hi {
		n.errs.add(p, i, "out of range [%d, %d]", lo, hi)
		return nil
	}
	return i
}

// duration accepts a Go duration ("15m", "1h30m") or protojson's form
// ("900s", "0.5s") and returns protojson's form.
func (n *refNormalizer) duration(v any, p path) any {
	s, ok := v.(string)
	if !ok {
		n.errs.add(p, nil, "expected a duration such as \"15m\", \"90s\" or \"1h30m\", got %s", describe(v))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n.errs.add(p, s, "must be a duration such as \"15m\", \"90s\" or \"1h30m\"")
		return nil
	}
	return protoDuration(d)
}

// FuzzDecodeMatchesReference checks the single decode against the
// decoder it replaced: the same cluster, or the same field errors. Where
// the reference failed inside protojson (a bug path: no field named), the
// decode must refuse too, naming the field.
func FuzzDecodeMatchesReference(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte(`{"apiVersion":"capn.dev/v1alpha1","kind":"Cluster","metadata":{"name":"j","creationTimestamp":"2025-01-02T15:04:05.5+01:00"},"spec":{"kubernetesVersion":"v1.34.2","controlPlane":{"maxSurge":"3","replicas":2.0},"bootstrap":{"tokenTtl":"-1.5s"}}}`))
	f.Add([]byte("metadata: {labels: {a: 1, b: null, a: 2}, generation: \"9\"}\nspec: {workerPools: [{name: x, taints: [null, {key: 1.5}]}], paused: yes, y: 1}\n"))
	f.Add([]byte("metadata: {name: \"\\xff\\xfeok\", creationTimestamp: \"0000-01-01T00:00:00Z\"}\n"))
	f.Add([]byte("spec: {kubernetes_version: v1, kubernetesVersion: v2, network: {podCidrs: [1, true]}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := parseDocuments(data)
		if err != nil {
			return
		}
		for _, doc := range docs {
			got, gotErr := decodeDocument(doc)
			want, wantErr := refDecodeDocument(doc)
			switch {
			case wantErr == nil && gotErr == nil:
				if !proto.Equal(got, want) {
					t.Fatalf("decoded\n%v\nreference decoded\n%v", got, want)
				}
			case wantErr == nil:
				t.Fatalf("refused what the reference decodes: %v", gotErr)
			case gotErr == nil:
				t.Fatalf("decoded what the reference refuses (%v): %v", wantErr, got)
			case isFieldErrors(wantErr):
				// The reference never reached protojson's timestamp checks
				// when another field was bad; the decode names them too.
				if withoutProtojsonChecks(gotErr) != wantErr.Error() {
					t.Fatalf("error\n%v\nreference error\n%v", gotErr, wantErr)
				}
			default:
				if !isFieldErrors(gotErr) {
					t.Fatalf("error without a field: %v (reference: %v)", gotErr, wantErr)
				}
			}
		}
	})
}

// withoutProtojsonChecks is err's text without the errors of checks that
// protojson made in the reference, after every other check.
func withoutProtojsonChecks(err error) string {
	var keep []error
	for _, e := range flatten(err) {
		var fe *FieldError
		if errors.As(e, &fe) && (strings.HasPrefix(fe.Reason, "out of range: must be between 0001") ||
			strings.HasPrefix(fe.Reason, "must have at most nine fractional digits")) {
			continue
		}
		keep = append(keep, e)
	}
	return errors.Join(keep...).Error()
}

func isFieldErrors(err error) bool {
	for _, e := range flatten(err) {
		var fe *FieldError
		if !errors.As(e, &fe) {
			return false
		}
	}
	return true
}
