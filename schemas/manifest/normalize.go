package manifest

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/reflect/protoreflect"
)

const (
	durationName  = "google.protobuf.Duration"
	timestampName = "google.protobuf.Timestamp"
)

// normalizer walks a decoded document along the protobuf descriptor of the
// message it should become. It reports unknown fields and wrong types with
// their paths (protojson's own errors name only a byte offset) and returns a
// tree protojson accepts: JSON names, Go durations rewritten as "900s",
// numbers in string fields as strings (maxSurge: 1).
type normalizer struct {
	errs fieldErrors
}

func (n *normalizer) message(v any, md protoreflect.MessageDescriptor, p path) any {
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

func (n *normalizer) field(v any, fd protoreflect.FieldDescriptor, p path) any {
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
func (n *normalizer) single(v any, fd protoreflect.FieldDescriptor, p path) any {
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

func (n *normalizer) integer(v any, fd protoreflect.FieldDescriptor, p path) any {
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
func (n *normalizer) duration(v any, p path) any {
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

// protoDuration formats d as protojson wants: seconds with up to nine
// fractional digits and an "s".
func protoDuration(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	secs, nanos := int64(d/time.Second), int64(d%time.Second)
	if nanos == 0 {
		return fmt.Sprintf("%s%ds", sign, secs)
	}
	frac := strings.TrimRight(fmt.Sprintf("%09d", nanos), "0")
	return fmt.Sprintf("%s%d.%ss", sign, secs, frac)
}

// describe names the YAML/JSON type of a decoded value for an error message.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case yaml.MapSlice, map[any]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "the string " + strconv.Quote(v)
	case bool:
		return fmt.Sprintf("the boolean %t", v)
	case int, int64, uint64, float64:
		return fmt.Sprintf("the number %v", v)
	default:
		return fmt.Sprintf("%T", v)
	}
}

func kindName(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		switch fd.Message().FullName() {
		case durationName:
			return "durations"
		case timestampName:
			return "timestamps"
		}
		return "objects"
	case protoreflect.StringKind, protoreflect.BytesKind:
		return "strings"
	case protoreflect.BoolKind:
		return "booleans"
	default:
		return "numbers"
	}
}

// suggest proposes the known field closest to an unknown one.
func suggest(key string, fields protoreflect.FieldDescriptors) string {
	best, bestDist := "", 3
	for i := range fields.Len() {
		name := fields.Get(i).JSONName()
		if strings.EqualFold(name, key) {
			return fmt.Sprintf("; did you mean %q?", name)
		}
		if d := editDistance(strings.ToLower(key), strings.ToLower(name)); d < bestDist {
			best, bestDist = name, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
