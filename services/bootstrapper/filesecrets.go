package bootstrapper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// missingSecret is a file whose bootstrap secret, or the secret's key,
// does not exist (yet).
type missingSecret struct {
	file, name, key string
	noKey           bool
}

func (m *missingSecret) message() string {
	if m.noKey {
		return fmt.Sprintf("file %s: bootstrap secret %q has no key %q (capn bootstrap-secret set %s --from-file %s=FILE); the machine waits for it",
			m.file, m.name, m.key, m.name, m.key)
	}
	return fmt.Sprintf("file %s: bootstrap secret %q not found (capn bootstrap-secret set %s --from-file %s=FILE); the machine waits for it",
		m.file, m.name, m.name, m.key)
}

// resolveFiles returns spec with each file's secretRef replaced by the
// secret's value, so that every bootstrap provider and format writes it as
// content, and a digest of the values read ("" when no file has a
// secretRef; it joins the input hash, so a changed secret gives new
// data). The secrets are read fresh from the bucket (sealed; only the
// bootstrapper may read them). A secret or key that does not exist is
// returned as missing, with spec unchanged.
func (s *Service) resolveFiles(ctx context.Context, spec *capnv1.BootstrapSpec) (*capnv1.BootstrapSpec, string, *missingSecret, error) {
	refs := false
	for _, f := range spec.GetFiles() {
		refs = refs || f.GetSecretRef() != nil
	}
	if !refs {
		return spec, "", nil, nil
	}
	out := proto.Clone(spec).(*capnv1.BootstrapSpec)
	read := map[string]*capnv1.BootstrapSecret{}
	digest := sha256.New()
	for _, f := range out.GetFiles() {
		ref := f.GetSecretRef()
		if ref == nil {
			continue
		}
		sec, ok := read[ref.GetName()]
		if !ok {
			var err error
			sec, _, err = s.bootSecrets.Get(ctx, keys.BootstrapSecret(ref.GetName()))
			if errors.Is(err, store.ErrNotFound) {
				return spec, "", &missingSecret{file: f.GetPath(), name: ref.GetName(), key: ref.GetKey()}, nil
			}
			if err != nil {
				return nil, "", nil, fmt.Errorf("read bootstrap secret %s: %w", ref.GetName(), err)
			}
			read[ref.GetName()] = sec
		}
		val, ok := sec.GetData()[ref.GetKey()]
		if !ok {
			return spec, "", &missingSecret{file: f.GetPath(), name: ref.GetName(), key: ref.GetKey(), noKey: true}, nil
		}
		sum := sha256.Sum256(val)
		fmt.Fprintf(digest, "%s\x00%s\x00%s\x00%x\n", f.GetPath(), ref.GetName(), ref.GetKey(), sum)
		f.Content = string(val)
		f.SecretRef = nil
	}
	return out, hex.EncodeToString(digest.Sum(nil)), nil, nil
}

// waiting tells the machine-manager that the machine's bootstrap data
// waits for a bootstrap secret, and ends the command: the machine-manager
// asks again while the machine waits. The event's id is per ask, so each
// ask is answered once.
func (s *Service) waiting(ctx context.Context, request string, cmd *capnv1.GenerateBootstrap, miss *missingSecret) error {
	ev := &capnv1.BootstrapWaiting{Cluster: cmd.GetCluster(), Machine: cmd.GetMachine(),
		Reason: annotations.ReasonBootstrapSecretNotFound, Message: miss.message(), Secret: miss.name}
	id := "bootstrap-waiting." + cmd.GetCluster() + "." + cmd.GetMachine() + "." + shortHash(miss.message()+"\n"+request)
	_, err := s.pub.Publish(ctx, events.EventSubject("bootstrap", "waiting", cmd.GetCluster(), cmd.GetMachine()),
		events.TypeBootstrapWaiting, id, ev, events.WithSubject(cmd.GetMachine()))
	return err
}

// withSecrets is the input hash of a command whose files read bootstrap
// secrets: the command's hash and the values' digest.
func withSecrets(hash, digest string) string {
	if digest == "" {
		return hash
	}
	sum := sha256.Sum256([]byte(hash + "\n" + digest))
	return hex.EncodeToString(sum[:])
}
