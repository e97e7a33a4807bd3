package bootstrapper

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// The machine's bootstrap credential. The checksum names the data but is
// public (observed, the API, the timeline); the credential proves the
// asker is the machine. It is minted with the data (256 random bits),
// kept only in the sealed record, and handed out once per create to the
// machine's own provider, which passes it to the machine as user data:
//
//	request  capn.bootstrap.credential.<provider>.<cluster>.<machine>
//	         header Capn-Bootstrap-Checksum: <CreateMachine.bootstrap_checksum>
//	reply    the credential (body), or a refusal as for the fetch
//
// Only provider users may publish there (each on its own <provider>), and
// the bootstrapper answers only for a machine of that provider, with the
// current checksum, that has not joined.
const (
	CredentialSubjectRoot = keys.BootstrapCredentialRoot
	// HeaderCredential carries the credential on a fetch. Required.
	HeaderCredential = "Capn-Bootstrap-Credential"
)

// credentialBytes is the credential's entropy: 256 bits.
const credentialBytes = 32

func newCredential() (string, error) {
	b := make([]byte, credentialBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("mint bootstrap credential: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// credentialMatches compares in constant time; an empty stored credential
// matches nothing.
func credentialMatches(stored, given string) bool {
	return stored != "" && subtle.ConstantTimeCompare([]byte(stored), []byte(given)) == 1
}

// serveCredentials answers providers' credential requests until ctx ends.
func (s *Service) serveCredentials(ctx context.Context, nc *nats.Conn, log zerolog.Logger) error {
	sub, err := nc.QueueSubscribe(CredentialSubjectRoot+".*.*.*", FetchQueue, func(m *nats.Msg) {
		body, code, err := s.credential(ctx, m.Subject, m.Header.Get(HeaderChecksum))
		reply := nats.NewMsg(m.Reply)
		if err != nil {
			log.Info().Err(err).Int("code", code).Str("subject", m.Subject).Msg("bootstrap credential refused")
			reply.Header.Set(HeaderError, err.Error())
			reply.Header.Set(HeaderErrorCode, strconv.Itoa(code))
		} else {
			reply.Data = body
		}
		if m.Reply == "" {
			return
		}
		if err := m.RespondMsg(reply); err != nil {
			log.Warn().Err(err).Str("subject", m.Subject).Msg("cannot answer a bootstrap credential request")
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", CredentialSubjectRoot, err)
	}
	go func() {
		<-ctx.Done()
		_ = sub.Unsubscribe()
	}()
	return nil
}

// credential returns the machine's credential for its provider, minting
// one for a record made before credentials existed.
func (s *Service) credential(ctx context.Context, subject, checksum string) ([]byte, int, error) {
	subj, err := keys.ParseSubject(subject)
	if err != nil || subj.Root != CredentialSubjectRoot {
		return nil, 400, fmt.Errorf("subject %q is not %s.<provider>.<cluster>.<machine>", subject, CredentialSubjectRoot)
	}
	provider, cluster, machine := subj.Provider, subj.Cluster, subj.Object
	want, code, err := s.wanted(cluster, machine)
	if err != nil {
		return nil, code, err
	}
	if p := want.GetSpec().GetProvider(); p != provider {
		return nil, 403, fmt.Errorf("machine %s/%s belongs to provider %q, not %q", cluster, machine, p, provider)
	}
	rec, code, err := s.current(ctx, cluster, machine, checksum)
	if err != nil {
		return nil, code, err
	}
	if rec.GetFetchCredential() != "" {
		return []byte(rec.GetFetchCredential()), 0, nil
	}
	cred, err := newCredential()
	if err != nil {
		return nil, 500, err
	}
	stored, _, err := s.boots.Mutate(ctx, keys.Bootstrap(cluster, machine), func(cur *capnv1.BootstrapData, exists bool) (*capnv1.BootstrapData, error) {
		switch {
		case !exists:
			return nil, store.ErrNotFound
		case cur.GetFetchCredential() != "":
			return nil, store.ErrNoChange
		}
		cur.FetchCredential = cred
		return cur, nil
	})
	if err != nil {
		return nil, 500, fmt.Errorf("store the bootstrap credential: %w", err)
	}
	return []byte(stored.GetFetchCredential()), 0, nil
}

// wanted returns the desired machine, or 404 when it is not wanted.
func (s *Service) wanted(cluster, machine string) (*capnv1.Machine, int, error) {
	e, ok := s.desired.Get(keys.Machine(cluster, machine))
	if !ok {
		return nil, 404, fmt.Errorf("machine %s/%s is not wanted", cluster, machine)
	}
	want, err := store.Decode(e.Value, store.New[capnv1.Machine]())
	if err != nil || want.GetMetadata().GetDeletionTimestamp() != nil {
		return nil, 404, fmt.Errorf("machine %s/%s is being deleted", cluster, machine)
	}
	return want, 0, nil
}

// current returns the machine's bootstrap record when checksum is its
// data's and the machine has not joined: the credential and the data are
// for joining only. The signal is the one the join token goes by: the
// machine's observed phase is Running (or the record says it joined).
func (s *Service) current(ctx context.Context, cluster, machine, checksum string) (*capnv1.BootstrapData, int, error) {
	if checksum == "" {
		return nil, 400, fmt.Errorf("header %s is required", HeaderChecksum)
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	rec, _, err := s.boots.Get(ctx, keys.Bootstrap(cluster, machine))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, 404, fmt.Errorf("no bootstrap data for %s/%s", cluster, machine)
	case err != nil:
		return nil, 500, fmt.Errorf("read bootstrap data: %w", err)
	case rec.GetChecksum() != checksum:
		return nil, 409, fmt.Errorf("checksum %s is not the current bootstrap data of %s/%s", checksum, cluster, machine)
	case rec.GetJoined() || s.machineJoined(cluster, machine):
		return nil, 410, fmt.Errorf("machine %s/%s has joined; its bootstrap data and credential are no longer served", cluster, machine)
	}
	return rec, 0, nil
}
