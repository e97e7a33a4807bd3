package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/manifest"
)

// manifestMediaTypes are the Content-Types a manifest may be sent with.
// Besides YAML and JSON, the types curl and friends send by default are
// taken: the body is read as YAML or JSON whatever they say.
var manifestMediaTypes = map[string]bool{
	"":                                  true,
	api.MediaYAML:                       true,
	"application/x-yaml":                true,
	"text/yaml":                         true,
	"text/x-yaml":                       true,
	api.MediaJSON:                       true,
	"text/plain":                        true,
	"application/octet-stream":          true,
	"application/x-www-form-urlencoded": true,
}

// readManifest reads a request's body as one Cluster manifest (YAML or
// JSON). A body over the limit is a 413; any other problem a 400 naming
// every bad field with its path.
func readManifest(r *http.Request) (*capnv1.Cluster, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if r.Header.Get("Content-Type") == "" {
		mt, err = "", nil
	}
	if err != nil || !manifestMediaTypes[mt] {
		return nil, problem(http.StatusUnsupportedMediaType, api.ProblemUnsupportedMedia, "Unsupported media type",
			"send the manifest as %s or %s, not %q", api.MediaYAML, api.MediaJSON, r.Header.Get("Content-Type"))
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	return decodeApply(body)
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

func invalidManifest(format string, args ...any) *problemError {
	return problem(http.StatusBadRequest, api.ProblemInvalidManifest, "Invalid manifest", format, args...)
}

// readJSON decodes a convenience endpoint's JSON body into v, refusing
// unknown fields and trailing data with the field's path. An empty body is
// accepted when optional (v keeps its zero value), else a 400.
func readJSON(r *http.Request, v any, optional bool) error {
	body, err := io.ReadAll(r.Body)
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
