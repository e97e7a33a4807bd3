package bootstrapper

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/replyseal"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// The bootstrap fetch: a machine's node agent asks for its own bootstrap
// data with a NATS request, so that no infrastructure provider ever reads
// the secrets bucket. The same protocol is written down for agents in
// providers/sdk (sdk.FetchBootstrap) and docs/providers.md.
const (
	// FetchSubjectRoot starts the request subject
	// capn.bootstrap.fetch.<cluster>.<machine>. No stream captures it: it
	// is plain request/reply, answered by one bootstrapper of the queue
	// group FetchQueue.
	FetchSubjectRoot = keys.BootstrapFetchRoot
	FetchQueue       = Name
	// HeaderChecksum carries the checksum the machine was created with
	// (CreateMachine.bootstrap_checksum). Required.
	HeaderChecksum = "Capn-Bootstrap-Checksum"
	// HeaderError and HeaderErrorCode carry a refusal (empty body), as the
	// NATS micro services convention does: 400 malformed, 404 no such
	// machine or data, 403 no or not the machine's credential
	// (HeaderCredential, credential.go), 409 the checksum is not the
	// current one, 410 the machine has joined, 500 the data cannot be read
	// now (retry).
	HeaderError     = "Nats-Service-Error"
	HeaderErrorCode = "Nats-Service-Error-Code"
)

// fetchTimeout bounds the KV read behind one answer.
const fetchTimeout = 5 * time.Second

// serveFetch answers bootstrap fetches until ctx ends. It returns once
// subscribed; the subscription is drained with the connection.
func (s *Service) serveFetch(ctx context.Context, nc *nats.Conn, log zerolog.Logger) error {
	sub, err := nc.QueueSubscribe(FetchSubjectRoot+".*.*", FetchQueue, func(m *nats.Msg) {
		s.answerFetch(ctx, m, log)
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", FetchSubjectRoot, err)
	}
	go func() {
		<-ctx.Done()
		_ = sub.Unsubscribe()
	}()
	return nil
}

// machineSecret is rec's machine secret (the machine's NATS login after
// its join, callout.go), minted for a record made before machine secrets
// existed.
func (s *Service) machineSecret(ctx context.Context, cluster, machine string, rec *capnv1.BootstrapData) (string, error) {
	if rec.GetMachineSecret() != "" {
		return rec.GetMachineSecret(), nil
	}
	secret, err := newCredential()
	if err != nil {
		return "", err
	}
	stored, _, err := s.boots.Mutate(ctx, keys.Bootstrap(cluster, machine), func(cur *capnv1.BootstrapData, exists bool) (*capnv1.BootstrapData, error) {
		switch {
		case !exists:
			return nil, store.ErrNotFound
		case cur.GetMachineSecret() != "":
			return nil, store.ErrNoChange
		}
		cur.MachineSecret = secret
		return cur, nil
	})
	if err != nil {
		return "", fmt.Errorf("store the machine secret of %s/%s: %w", cluster, machine, err)
	}
	return stored.GetMachineSecret(), nil
}

// answerFetch replies with the machine's sealed bootstrap data, opened,
// as BootstrapData{format, data, checksum} sealed with the machine's
// credential (events/replyseal) — only when the machine is
// wanted (desired, not being deleted), has not joined, the checksum asked
// for is the one stored and the request carries the machine's credential. Everything else is refused with a code.
func (s *Service) answerFetch(ctx context.Context, m *nats.Msg, log zerolog.Logger) {
	data, code, err := s.fetch(ctx, m.Subject, m.Header.Get(HeaderChecksum), m.Header.Get(HeaderCredential))
	reply := nats.NewMsg(m.Reply)
	if err != nil {
		log.Info().Err(err).Int("code", code).Str("subject", m.Subject).Msg("bootstrap fetch refused")
		reply.Header.Set(HeaderError, err.Error())
		reply.Header.Set(HeaderErrorCode, strconv.Itoa(code))
	} else {
		reply.Data = data
		log.Debug().Str("subject", m.Subject).Msg("bootstrap data fetched")
	}
	if m.Reply == "" {
		return
	}
	if err := m.RespondMsg(reply); err != nil {
		log.Warn().Err(err).Str("subject", m.Subject).Msg("cannot answer a bootstrap fetch")
	}
}

// fetch returns the reply body, or a refusal code and reason. The
// request must carry the machine's credential: the checksum alone is
// public and is refused (403).
func (s *Service) fetch(ctx context.Context, subject, checksum, credential string) ([]byte, int, error) {
	subj, err := keys.ParseSubject(subject)
	if err != nil || subj.Root != FetchSubjectRoot {
		return nil, 400, fmt.Errorf("subject %q is not %s.<cluster>.<machine>", subject, FetchSubjectRoot)
	}
	cluster, machine := subj.Cluster, subj.Object
	if credential == "" {
		return nil, 403, fmt.Errorf("header %s is required: the machine's bootstrap credential, from its provider", HeaderCredential)
	}
	if _, code, err := s.wanted(cluster, machine); err != nil {
		return nil, code, err
	}
	rec, code, err := s.current(ctx, cluster, machine, checksum)
	if err != nil {
		return nil, code, err
	}
	if !credentialMatches(rec.GetFetchCredential(), credential) {
		return nil, 403, fmt.Errorf("header %s is not the bootstrap credential of %s/%s", HeaderCredential, cluster, machine)
	}
	secret, err := s.machineSecret(ctx, cluster, machine, rec)
	if err != nil {
		return nil, 500, err
	}
	out, err := proto.MarshalOptions{Deterministic: true}.Marshal(&capnv1.BootstrapData{
		Format: rec.GetFormat(), Data: rec.GetData(), Checksum: rec.GetChecksum(), MachineSecret: secret,
	})
	if err != nil {
		return nil, 500, err
	}
	// Sealed for the credential's holder: other node agents can read the
	// node user's inbox (replyseal).
	if out, err = replyseal.Seal(credential, subject, out); err != nil {
		return nil, 500, err
	}
	return out, 0, nil
}
