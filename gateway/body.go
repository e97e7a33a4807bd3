package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// bodyMediaTypes are the Content-Types a body may be sent with: YAML or
// JSON, or none (a manifest is then read as YAML or JSON whatever it is;
// a convenience endpoint's body is JSON, which YAML types take too). The types a browser may send cross-origin without asking first
// (text/plain, application/x-www-form-urlencoded, multipart/form-data) are
// refused, so that a page elsewhere cannot post a manifest (CSRF; the
// Origin check in origin.go is the other half).
var bodyMediaTypes = mediaTypes{api.MediaYAML, "application/x-yaml", "text/yaml", "text/x-yaml", api.MediaJSON}

// mediaTypes is the list of Content-Types an endpoint reads.
type mediaTypes []string

// check returns the 415 for a Content-Type not in m; none is taken.
func (m mediaTypes) check(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && slices.Contains(m, strings.ToLower(mt)) {
		return nil
	}
	return problem(http.StatusUnsupportedMediaType, api.ProblemUnsupportedMedia, "Unsupported media type",
		"this endpoint reads %s, not %q", strings.Join(m, ", "), ct)
}

// readManifest reads a request's body as one Cluster manifest (YAML or
// JSON). A body over the limit is a 413, a Content-Type other than YAML or
// JSON a 415; any other problem a 400 naming every bad field with its path.
func readManifest(r *http.Request) (*capnv1.Cluster, error) {
	if err := bodyMediaTypes.check(r); err != nil {
		return nil, err
	}
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	return decodeApply(body)
}

// readBody reads a request's body. A body over the route's limit is a 413
// and one that does not arrive within the server's read timeout a 408:
// both the client's doing.
func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	var ne net.Error
	switch {
	case err == nil:
		return body, nil
	case errors.As(err, &ne) && ne.Timeout():
		return nil, problem(http.StatusRequestTimeout, api.ProblemRequestTimeout, "Request timeout",
			"the body did not arrive within the gateway's read timeout (%d bytes came); send it at once", len(body))
	}
	return nil, err
}

// decodeApply decodes one Cluster manifest. It is pure (FuzzApply runs it):
// every error is a *problemError, 400 invalid-manifest.
func decodeApply(body []byte) (*capnv1.Cluster, error) {
	c, err := manifest.Decode(body)
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, manifest.ErrEmpty):
		return nil, invalidManifest("the manifest is empty: send one Cluster in YAML or JSON")
	case errors.Is(err, manifest.ErrMultipleDocuments):
		return nil, invalidManifest("the manifest has more than one document: send one Cluster per request (the CLI applies a multi-document file one cluster at a time)")
	}
	p := fieldProblem(http.StatusBadRequest, api.ProblemInvalidManifest, "Invalid manifest", err)
	return nil, p
}

// readOne reads a request's body as one manifest of kind, decoded by
// decode: the media type checked, an empty or multi-document body a 400
// that names the kind, a bad one a 400 with the field.
func readOne[T any](r *http.Request, kind string, decode func([]byte) (T, error)) (T, error) {
	var zero T
	if err := bodyMediaTypes.check(r); err != nil {
		return zero, err
	}
	body, err := readBody(r)
	if err != nil {
		return zero, err
	}
	in, err := decode(body)
	switch {
	case err == nil:
		return in, nil
	case errors.Is(err, manifest.ErrEmpty):
		return zero, invalidManifest("the manifest is empty: send one %s in YAML or JSON", kind)
	case errors.Is(err, manifest.ErrMultipleDocuments):
		return zero, invalidManifest("the manifest has more than one document: send one %s per request", kind)
	}
	return zero, fieldProblem(http.StatusBadRequest, api.ProblemInvalidManifest, "Invalid manifest", err)
}

func invalidManifest(format string, args ...any) *problemError {
	return problem(http.StatusBadRequest, api.ProblemInvalidManifest, "Invalid manifest", format, args...)
}

// readJSON decodes a convenience endpoint's JSON body (Content-Type
// JSON, YAML or none) into v, refusing
// unknown fields and trailing data with the field's path. An empty body is
// accepted when optional (v keeps its zero value), else a 400.
func readJSON(r *http.Request, v any, optional bool) error {
	if err := bodyMediaTypes.check(r); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return badRequest("a JSON body is required")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &te):
			return badRequest("the body does not match the request's fields").
				withField(te.Field, fmt.Sprintf("expected %s, got a JSON %s", jsonTypeName(te.Type.String()), te.Value), nil)
		case errors.As(err, &se):
			return badRequest("the body is not JSON: %v (at byte %d)", err, se.Offset)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return badRequest("the body has an unknown field").withField(field, "unknown field", nil)
		default:
			return badRequest("the body is not valid JSON: %v", err)
		}
	}
	if dec.More() {
		return badRequest("the body has data after its JSON object")
	}
	return nil
}

func jsonTypeName(goType string) string {
	switch {
	case strings.Contains(goType, "int"):
		return "an integer"
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "true or false"
	}
	return goType
}
