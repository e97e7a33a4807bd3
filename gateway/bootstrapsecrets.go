package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
)

// Bootstrap secrets (capn bootstrap-secret): named values that machines'
// bootstrap files take their content from (files[].secretRef), sealed in
// secrets as bootstrapsecret.<name>; written here, read only by the
// bootstrapper, never given back by the API.

// putBootstrapSecret is PUT /v1/bootstrapsecrets/{name}: the body is
// {"data": {"<key>": "<base64 value>"}} (api.BootstrapSecret) and replaces
// the secret's data. Each bad key is a 422 naming data[<key>]. The answer
// is the secret without its values (name, keys, hash, updated); 201 when
// it was created.
func (s *server) putBootstrapSecret(w http.ResponseWriter, r *http.Request) error {
	if s.bootstrapSecrets == nil {
		return unavailableSecrets()
	}
	name, err := pathName(r, "name")
	if err != nil {
		return err
	}
	if err := (mediaTypes{api.MediaJSON}).check(r); err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var in api.BootstrapSecret
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return badRequest("the body is not a bootstrap secret ({\"data\": {\"KEY\": \"BASE64 VALUE\"}}): %v", err)
	}
	if err := checkBootstrapSecret(in); err != nil {
		return fieldProblem(http.StatusUnprocessableEntity, api.ProblemInvalidSpec, "Invalid bootstrap secret", err)
	}
	sec := &capnv1.BootstrapSecret{Name: name, Data: in.Data, Hash: bootstrapSecretHash(in.Data),
		Updated: timestamppb.New(s.now().UTC().Truncate(time.Second))}
	created := false
	_, _, err = s.bootstrapSecrets.Mutate(r.Context(), keys.BootstrapSecret(name), func(cur *capnv1.BootstrapSecret, exists bool) (*capnv1.BootstrapSecret, error) {
		created = !exists
		if exists && cur.GetHash() == sec.GetHash() {
			sec.Updated = cur.GetUpdated()
			return nil, store.ErrNoChange
		}
		return sec, nil
	})
	if err != nil {
		return err
	}
	ks := secretKeys(in.Data)
	zerolog.Ctx(r.Context()).Info().Str("bootstrap_secret", name).Strs("keys", ks).Msg("bootstrap secret written")
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, api.BootstrapSecretInfo{Name: name, Keys: ks, Hash: sec.GetHash(), Updated: sec.GetUpdated().AsTime()})
	return nil
}

// checkBootstrapSecret refuses an empty secret and keys that are not a
// Kubernetes Secret's data keys, each error naming data[<key>].
func checkBootstrapSecret(in api.BootstrapSecret) error {
	if len(in.Data) == 0 {
		return &manifest.FieldError{Path: "data", Reason: "required: at least one key and its value"}
	}
	var errs []error
	for _, k := range secretKeys(in.Data) {
		if !manifest.IsSecretKey(k) {
			errs = append(errs, &manifest.FieldError{Path: fmt.Sprintf("data[%q]", k), Reason: "a key must be at most 253 letters, digits, '-', '_' or '.'"})
		}
	}
	return errors.Join(errs...)
}

// bootstrapSecretHash is a digest of the data (sha256 over the sorted keys
// and values, 16 hex digits).
func bootstrapSecretHash(data map[string][]byte) string {
	h := sha256.New()
	for _, k := range secretKeys(data) {
		fmt.Fprintf(h, "%d:%s%d:", len(k), k, len(data[k]))
		h.Write(data[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func secretKeys(data map[string][]byte) []string {
	return slices.Sorted(maps.Keys(data))
}

// deleteBootstrapSecret is DELETE /v1/bootstrapsecrets/{name}. Machines
// already bootstrapped keep their files; a machine created later whose
// file names the secret waits for it.
func (s *server) deleteBootstrapSecret(w http.ResponseWriter, r *http.Request) error {
	return deleteSecret(w, r, s.bootstrapSecrets, keys.BootstrapSecret, "bootstrap secret")
}
