package manifest

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/reflect/protoreflect"
)

const (
	durationName  = "google.protobuf.Duration"
	timestampName = "google.protobuf.Timestamp"
)

// filler walks a decoded document along the protobuf message it fills,
// setting each field as it goes: the document is read once into the typed
// message, with no tree, JSON or protojson in between. It reports unknown
// fields and wrong types with their paths and accepts what protojson would
// (JSON or proto field names, null as unset, 64-bit integers as strings,
// RFC 3339 timestamps) and more: Go durations ("15m"), numbers in string
// fields (maxSurge: 1). Strings are stored as JSON would carry them: each
// byte that is not UTF-8 becomes U+FFFD. On any error the message is
// half-filled and must be dropped.
type filler struct {
	errs fieldErrors
}

func (f *filler) message(v any, m protoreflect.Message, p path) {
	md := m.Descriptor()
	switch md.FullName() {
	case durationName:
		f.duration(v, m, p)
		return
	case timestampName:
		f.timestamp(v, m, p)
		return
	}
	ms, ok := v.(yaml.MapSlice)
	if !ok {
		f.errs.add(p, nil, "expected an object, got %s", describe(v))
		return
	}
	fields := md.Fields()
	seen := newFieldSet(fields.Len())
	for _, it := range ms {
		key := keyString(it.Key) // YAML 1.1 reads keys such as y or on as booleans
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		fp := p.child(key)
		if fd == nil {
			f.errs.add(fp, nil, "unknown field%s", suggest(key, fields))
			continue
		}
		if seen.has(fd.Index()) {
			f.errs.add(fp, nil, "duplicate field")
			continue
		}
		seen.add(fd.Index())
		if it.Value == nil {
			continue // null is unset, as in protojson
		}
		f.field(it.Value, m, fd, fp)
	}
}

func (f *filler) field(v any, m protoreflect.Message, fd protoreflect.FieldDescriptor, p path) {
	switch {
	case fd.IsMap():
		ms, ok := v.(yaml.MapSlice)
		if !ok {
			f.errs.add(p, nil, "expected a map of %s, got %s", kindName(fd.MapValue()), describe(v))
			return
		}
		if fd.MapKey().Kind() != protoreflect.StringKind {
			f.errs.add(p, nil, "maps with %s keys are not supported", fd.MapKey().Kind())
			return
		}
		mp := m.Mutable(fd).Map()
		vd := fd.MapValue()
		for _, it := range ms {
			k := keyString(it.Key)
			kp := p.key(k)
			mk := protoreflect.ValueOfString(jsonString(k)).MapKey()
			if mp.Has(mk) {
				f.errs.add(kp, nil, "duplicate key")
				continue
			}
			if it.Value == nil {
				f.errs.add(kp, nil, "expected %s, got null", kindName(vd))
				continue
			}
			if isMessage(vd) {
				val := mp.NewValue()
				f.message(it.Value, val.Message(), kp)
				mp.Set(mk, val)
				continue
			}
			val, ok := f.scalar(it.Value, vd, kp)
			if !ok {
				val = vd.Default() // taken, for the duplicate check
			}
			mp.Set(mk, val)
		}
	case fd.IsList():
		arr, ok := v.([]any)
		if !ok {
			f.errs.add(p, nil, "expected a list of %s, got %s", kindName(fd), describe(v))
			return
		}
		l := m.Mutable(fd).List()
		for i, e := range arr {
			ip := p.index(i)
			switch {
			case e == nil:
				f.errs.add(ip, nil, "expected %s, got null", kindName(fd))
			case isMessage(fd):
				el := l.NewElement()
				f.message(e, el.Message(), ip)
				l.Append(el)
			default:
				if val, ok := f.scalar(e, fd, ip); ok {
					l.Append(val)
				}
			}
		}
	case isMessage(fd):
		f.message(v, m.Mutable(fd).Message(), p)
	default:
		if val, ok := f.scalar(v, fd, p); ok {
			m.Set(fd, val)
		}
	}
}

func isMessage(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind
}

// scalar reads one value of fd's kind, not a message (a list element, a
// map value or a singular field).
func (f *filler) scalar(v any, fd protoreflect.FieldDescriptor, p path) (protoreflect.Value, bool) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		switch v := v.(type) {
		case string:
			return protoreflect.ValueOfString(jsonString(v)), true
		case int, int64, uint64:
			return protoreflect.ValueOfString(fmt.Sprint(v)), true // maxSurge: 1 means "1"
		case float64:
			return protoreflect.ValueOfString(strconv.FormatFloat(v, 'f', -1, 64)), true
		case bool:
			f.errs.add(p, v, "expected a string, got a boolean: quote it (\"%t\")", v)
		default:
			f.errs.add(p, nil, "expected a string, got %s", describe(v))
		}
	case protoreflect.BytesKind:
		s, ok := v.(string)
		if !ok {
			f.errs.add(p, nil, "expected a base64 string, got %s", describe(v))
			break
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			f.errs.add(p, s, "must be base64")
			break
		}
		return protoreflect.ValueOfBytes(b), true
	case protoreflect.BoolKind:
		if b, ok := v.(bool); ok {
			return protoreflect.ValueOfBool(b), true
		}
		f.errs.add(p, nil, "expected true or false, got %s", describe(v))
	case protoreflect.EnumKind:
		switch x := v.(type) {
		case string:
			if ev := fd.Enum().Values().ByName(protoreflect.Name(x)); ev != nil {
				return protoreflect.ValueOfEnum(ev.Number()), true
			}
			f.errs.add(p, x, "not a value of %s", fd.Enum().FullName())
		case int, int64:
			if i, ok := f.integer(v, protoreflect.Int32Kind, p); ok {
				return protoreflect.ValueOfEnum(protoreflect.EnumNumber(i)), true
			}
		default:
			f.errs.add(p, nil, "expected an enum name, got %s", describe(v))
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		var x float64
		switch n := v.(type) {
		case int:
			x = float64(n)
		case int64:
			x = float64(n)
		case uint64:
			x = float64(n)
		case float64:
			x = n
		default:
			f.errs.add(p, nil, "expected a number, got %s", describe(v))
			return protoreflect.Value{}, false
		}
		if fd.Kind() == protoreflect.DoubleKind {
			return protoreflect.ValueOfFloat64(x), true
		}
		if math.Abs(x) > math.MaxFloat32 {
			f.errs.add(p, x, "out of range of a 32-bit float")
			break
		}
		return protoreflect.ValueOfFloat32(float32(x)), true
	default: // the integer kinds
		i, ok := f.integer(v, fd.Kind(), p)
		if !ok {
			break
		}
		switch fd.Kind() {
		case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
			return protoreflect.ValueOfInt32(int32(i)), true
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
			return protoreflect.ValueOfUint32(uint32(i)), true
		case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			return protoreflect.ValueOfUint64(uint64(i)), true
		default:
			return protoreflect.ValueOfInt64(i), true
		}
	}
	return protoreflect.Value{}, false
}

// integer reads an integer within the range of kind.
func (f *filler) integer(v any, kind protoreflect.Kind, p path) (int64, bool) {
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
		f.errs.add(p, nil, "expected an integer, got %s", describe(v))
		return 0, false
	}
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	switch kind {
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		lo, hi = math.MinInt32, math.MaxInt32
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		lo, hi = 0, math.MaxUint32
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		lo = 0
	}
	if i < lo || i > hi {
		f.errs.add(p, i, "out of range [%d, %d]", lo, hi)
		return 0, false
	}
	return i, true
}

// duration accepts a Go duration ("15m", "1h30m") or protojson's form
// ("900s", "0.5s"). Every Go duration is within protobuf's range.
func (f *filler) duration(v any, m protoreflect.Message, p path) {
	s, ok := v.(string)
	if !ok {
		f.errs.add(p, nil, "expected a duration such as \"15m\", \"90s\" or \"1h30m\", got %s", describe(v))
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		f.errs.add(p, s, "must be a duration such as \"15m\", \"90s\" or \"1h30m\"")
		return
	}
	fields := m.Descriptor().Fields()
	m.Set(fields.ByNumber(1), protoreflect.ValueOfInt64(int64(d/time.Second)))
	m.Set(fields.ByNumber(2), protoreflect.ValueOfInt32(int32(d%time.Second)))
}

// Protobuf's range of timestamps: 0001-01-01 to 9999-12-31, UTC.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

// timestamp accepts an RFC 3339 timestamp as protojson does: within
// protobuf's range, at most nine fractional digits.
func (f *filler) timestamp(v any, m protoreflect.Message, p path) {
	s, ok := v.(string)
	if !ok {
		f.errs.add(p, nil, "expected a timestamp such as \"2025-01-02T15:04:05Z\", got %s", describe(v))
		return
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		f.errs.add(p, s, "must be an RFC 3339 timestamp such as \"2025-01-02T15:04:05Z\"")
		return
	}
	if secs := t.Unix(); secs < minTimestampSeconds || secs > maxTimestampSeconds {
		f.errs.add(p, s, "out of range: must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z")
		return
	}
	i, j := strings.LastIndexByte(s, '.'), strings.LastIndexAny(s, "Z-+")
	if i >= 0 && j >= i && j-i > len(".999999999") {
		f.errs.add(p, s, "must have at most nine fractional digits (nanoseconds)")
		return
	}
	fields := m.Descriptor().Fields()
	m.Set(fields.ByNumber(1), protoreflect.ValueOfInt64(t.Unix()))
	m.Set(fields.ByNumber(2), protoreflect.ValueOfInt32(int32(t.Nanosecond())))
}

// keyString is a mapping key as a string; YAML may give other types.
func keyString(k any) string {
	if s, ok := k.(string); ok {
		return s
	}
	return fmt.Sprint(k)
}

// jsonString is s as a JSON round trip gives it back: every byte that is
// not part of valid UTF-8 becomes U+FFFD (protobuf strings must be UTF-8).
func jsonString(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// fieldSet is the fields of one message already seen, by index.
type fieldSet struct {
	small uint64
	large []bool
}

func newFieldSet(n int) fieldSet {
	if n > 64 {
		return fieldSet{large: make([]bool, n)}
	}
	return fieldSet{}
}

func (s *fieldSet) has(i int) bool {
	if s.large != nil {
		return s.large[i]
	}
	return s.small&(1<<i) != 0
}

func (s *fieldSet) add(i int) {
	if s.large != nil {
		s.large[i] = true
		return
	}
	s.small |= 1 << i
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
