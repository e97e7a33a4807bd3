package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/schemas/manifest"
)

// problemError is an error that is also the RFC 9457 problem to answer it
// with. Handlers return one for every failure a client caused; anything
// else becomes a 500 (or a 503 when JetStream did not answer).
type problemError struct {
	api.Problem
	// retryAfter, when positive, is sent as Retry-After (seconds, rounded up).
	retryAfter time.Duration
	// header holds extra response headers (WWW-Authenticate, Allow).
	header http.Header
}

func (p *problemError) Error() string { return p.Problem.Error() }

// problem makes a problem of the given type with a formatted detail.
func problem(status int, typ, title, format string, args ...any) *problemError {
	return &problemError{Problem: api.Problem{
		Type: typ, Title: title, Status: status, Detail: fmt.Sprintf(format, args...),
	}}
}

func notFound(format string, args ...any) *problemError {
	return problem(http.StatusNotFound, api.ProblemNotFound, "Not found", format, args...)
}

func conflict(format string, args ...any) *problemError {
	return problem(http.StatusConflict, api.ProblemConflict, "Conflict", format, args...)
}

func badRequest(format string, args ...any) *problemError {
	return problem(http.StatusBadRequest, api.ProblemInvalidRequest, "Invalid request", format, args...)
}

// unavailable is a 503 asking the client to retry after a while.
func unavailable(format string, args ...any) *problemError {
	p := problem(http.StatusServiceUnavailable, api.ProblemUnavailable, "Service unavailable", format, args...)
	p.retryAfter = retryAfterUnavailable
	return p
}

// retryAfterUnavailable is the Retry-After of a 503.
const retryAfterUnavailable = 2 * time.Second

// withField adds one field violation.
func (p *problemError) withField(path, reason string, value any) *problemError {
	fv := api.FieldViolation{Path: path, Reason: reason}
	if value != nil {
		fv.Value = fmt.Sprint(value)
	}
	p.Errors = append(p.Errors, fv)
	return p
}

// fieldProblem turns err (an errors.Join of *manifest.FieldError, possibly
// nested, possibly mixed with other errors) into a problem listing every
// field with its path. Errors that carry no path go into the detail.
func fieldProblem(status int, typ, title string, err error) *problemError {
	p := &problemError{Problem: api.Problem{Type: typ, Title: title, Status: status}}
	var other []string
	for _, e := range leaves(err) {
		var fe *manifest.FieldError
		if errors.As(e, &fe) {
			path := fe.Path
			if path == "" {
				path = "(document)" // e.g. a top-level key ""
			}
			p.withField(path, fe.Reason, fe.Value)
			continue
		}
		other = append(other, e.Error())
	}
	switch {
	case len(other) == 1:
		p.Detail = other[0]
	case len(other) > 1:
		b, _ := json.Marshal(other)
		p.Detail = string(b)
	case len(p.Errors) == 1:
		p.Detail = "1 field is invalid"
	default:
		p.Detail = strconv.Itoa(len(p.Errors)) + " fields are invalid"
	}
	return p
}

// leaves flattens errors.Join trees (and errors wrapping a join) into their
// leaf errors, keeping order.
func leaves(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	// A %w-wrapped join, e.g. "document 1: <join>": look inside.
	if inner := errors.Unwrap(err); inner != nil {
		if _, ok := inner.(interface{ Unwrap() []error }); ok {
			return leaves(inner)
		}
	}
	return []error{err}
}

// asProblem maps any error a handler returned to the problem to answer with.
// JetStream failures that a retry may cure (timeouts, no responders, a lost
// connection) are 503 with Retry-After; unknown errors are 500 and their
// text is not shown to the client (it is logged).
func asProblem(err error) (p *problemError, internal bool) {
	var pe *problemError
	if errors.As(err, &pe) {
		return pe, false
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge(mbe.Limit), false
	}
	var ce *store.CorruptError
	if errors.As(err, &ce) {
		return corruptProblem(ce), true
	}
	if isTransient(err) {
		return unavailable("JetStream did not answer in time; retry later"), true
	}
	return problem(http.StatusInternalServerError, api.ProblemInternal, "Internal error",
		"the gateway failed to handle the request; the error is logged"), true
}

// isTransient reports whether err is NATS or JetStream being unreachable or
// slow rather than a bad request.
func isTransient(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrConnectionDraining) ||
		errors.Is(err, nats.ErrDisconnected) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) ||
		errors.Is(err, jetstream.ErrTooManyStalledMsgs)
}

// writeProblem writes p as application/problem+json.
func writeProblem(w http.ResponseWriter, r *http.Request, p *problemError) {
	h := w.Header()
	for k, vs := range p.header {
		h[k] = vs
	}
	if p.retryAfter > 0 {
		secs := int((p.retryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.Itoa(secs))
	}
	body := p.Problem
	if body.Instance == "" && r != nil {
		body.Instance = r.URL.Path
	}
	h.Set("Content-Type", api.MediaProblem)
	h.Set("Cache-Control", "no-store")
	h.Del("Content-Length")
	w.WriteHeader(body.Status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(body)
}

// writeJSON writes v (a json.Marshaler, raw JSON bytes or any value) with
// the status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b []byte
	switch v := v.(type) {
	case json.RawMessage:
		b = v
	case []byte:
		b = v
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			b = []byte(`{}`)
		}
	}
	w.Header().Set("Content-Type", api.MediaJSON)
	w.WriteHeader(status)
	_, _ = w.Write(b)
	_, _ = w.Write([]byte("\n"))
}
