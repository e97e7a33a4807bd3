package manifest

import (
	"fmt"
	"strconv"
)

// FieldError is one bad field of a manifest: where, what was there and why it
// is refused (the Reason also says what is allowed). Validation and decoding
// return every FieldError at once, joined with errors.Join; find them with
// errors.As or by unwrapping the join.
type FieldError struct {
	// Path is the field's path with the manifest's names, e.g.
	// spec.workerPools[0].strategy.maxSurge or metadata.labels[app].
	Path string
	// Value is the offending value, or nil when there is none to show
	// (a missing or unknown field).
	Value any
	// Reason says why the value is refused and what is allowed.
	Reason string
}

// Error renders "path: value: reason", or "path: reason" without a value.
func (e *FieldError) Error() string {
	if e.Value == nil {
		return e.Path + ": " + e.Reason
	}
	return e.Path + ": " + formatValue(e.Value) + ": " + e.Reason
}

func formatValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case fmt.Stringer:
		return v.String()
	default:
		return fmt.Sprint(v)
	}
}

// fieldErrors collects FieldErrors in the order they are found.
type fieldErrors []error

func (fe *fieldErrors) add(path path, value any, format string, args ...any) {
	*fe = append(*fe, &FieldError{Path: string(path), Value: value, Reason: fmt.Sprintf(format, args...)})
}

// path is a field path under construction: "spec", "spec.workerPools[0]".
type path string

func (p path) child(name string) path {
	if p == "" {
		return path(name)
	}
	return p + "." + path(name)
}

func (p path) index(i int) path { return p + path("["+strconv.Itoa(i)+"]") }

func (p path) key(k string) path { return p + path("["+k+"]") }
