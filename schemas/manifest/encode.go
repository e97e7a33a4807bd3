package manifest

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Encode writes a Cluster as a YAML manifest that Decode reads back: fields in
// schema order with their lowerCamelCase names, durations as Go durations
// ("15m"), 64-bit integers as numbers, empty fields left out.
func Encode(c *capnv1.Cluster) ([]byte, error) { return encode(c, "cluster") }

// EncodeAddonSet writes an AddonSet as Encode writes a Cluster (its
// manifests' YAML as block strings); DecodeAddonSet reads it back.
func EncodeAddonSet(s *capnv1.AddonSet) ([]byte, error) { return encode(s, "add-on set") }

// EncodeMessage writes any capn resource (a ClusterClass, a Rollout) as
// Encode does a Cluster.
func EncodeMessage(m proto.Message) ([]byte, error) {
	return encode(m, string(m.ProtoReflect().Descriptor().Name()))
}

func encode(m proto.Message, what string) ([]byte, error) {
	j, err := protojson.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", what, err)
	}
	docs, err := parseJSON(j)
	if err != nil || len(docs) != 1 {
		return nil, fmt.Errorf("encode %s: re-read protojson: %v", what, err)
	}
	tree := denormalize(docs[0], m.ProtoReflect().Descriptor())
	out, err := yaml.Marshal(tree)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", what, err)
	}
	return out, nil
}

// EncodeAll writes clusters as one YAML stream, documents separated by "---".
func EncodeAll(cs []*capnv1.Cluster) ([]byte, error) {
	var buf bytes.Buffer
	for i, c := range cs {
		if i > 0 {
			buf.WriteString("---\n")
		}
		b, err := Encode(c)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

// denormalize turns protojson's output into friendlier YAML values: Go
// durations, and numbers for the int64 fields protojson quotes.
func denormalize(v any, md protoreflect.MessageDescriptor) any {
	if md.FullName() == durationName {
		if s, ok := v.(string); ok {
			if d, err := time.ParseDuration(s); err == nil {
				return shortDuration(d)
			}
		}
		return v
	}
	ms, ok := v.(yaml.MapSlice)
	if !ok {
		return v
	}
	for i, it := range ms {
		fd := md.Fields().ByJSONName(fmt.Sprint(it.Key))
		if fd == nil {
			continue
		}
		ms[i].Value = denormalizeField(it.Value, fd)
	}
	return ms
}

func denormalizeField(v any, fd protoreflect.FieldDescriptor) any {
	switch {
	case fd.IsMap():
		if ms, ok := v.(yaml.MapSlice); ok {
			for i, it := range ms {
				ms[i].Value = denormalizeSingle(it.Value, fd.MapValue())
			}
		}
		return v
	case fd.IsList():
		if arr, ok := v.([]any); ok {
			for i, e := range arr {
				arr[i] = denormalizeSingle(e, fd)
			}
		}
		return v
	default:
		return denormalizeSingle(v, fd)
	}
}

func denormalizeSingle(v any, fd protoreflect.FieldDescriptor) any {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return denormalize(v, fd.Message())
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if s, ok := v.(string); ok {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return i
			}
		}
	}
	return v
}

// shortDuration is d.String() without trailing zero units: "15m", "1h", "1h30m".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
