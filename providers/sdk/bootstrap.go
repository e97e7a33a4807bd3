package sdk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/replyseal"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
)

// The bootstrap fetch. A provider never reads the secrets bucket: it hands
// its machine the identity (cluster, machine), the bootstrap checksum of
// the CreateMachine command and the machine's bootstrap credential
// (CreateMachine.bootstrap_credential, which the SDK gets from the
// bootstrapper for a NodeAgentProvider), and the machine's node agent asks
// the bootstrapper for its own data with a NATS request:
//
//	request  capn.bootstrap.fetch.<cluster>.<machine>
//	         header Capn-Bootstrap-Checksum: <CreateMachine.bootstrap_checksum>
//	         header Capn-Bootstrap-Credential: <CreateMachine.bootstrap_credential>
//	         empty body
//	reply    BootstrapData{format, data, checksum} (protobuf) sealed with
//	         the credential (events/replyseal: AES-256-GCM, key
//	         HKDF-SHA-256 of the credential, bound to the subject), or an empty
//	         body with Nats-Service-Error-Code (400 malformed, 403 no or a
//	         wrong credential, 404 no such machine or data, 409 not the
//	         current checksum, 410 the machine has joined, 500 retry) and
//	         Nats-Service-Error (the reason).
//
// The bootstrapper answers only for a machine that is wanted (desired, not
// being deleted) and has not joined, with the data whose checksum the
// request names, to a request with the machine's credential. The checksum
// is public; the credential is 256 random bits that only the bootstrapper,
// the machine's provider and the machine see (docs/security.md).
const (
	BootstrapFetchRoot      = keys.BootstrapFetchRoot
	HeaderBootstrapChecksum = "Capn-Bootstrap-Checksum"
	// HeaderBootstrapCredential carries the machine's credential on a fetch.
	HeaderBootstrapCredential = "Capn-Bootstrap-Credential"
	// BootstrapCredentialRoot starts capn.bootstrap.credential.<provider>.<cluster>.<machine>,
	// where a provider asks for its machine's credential.
	BootstrapCredentialRoot = keys.BootstrapCredentialRoot
	HeaderServiceError      = "Nats-Service-Error"
	HeaderServiceErrorCode  = "Nats-Service-Error-Code"
)

// DefaultFetchTimeout bounds one fetch when ctx has no deadline.
const DefaultFetchTimeout = 5 * time.Second

// BootstrapFetchSubject is capn.bootstrap.fetch.<cluster>.<machine>.
func BootstrapFetchSubject(cluster, machine string) string {
	return keys.BootstrapFetch(cluster, machine)
}

// FetchError is a refusal by the bootstrapper.
type FetchError struct {
	Code    int
	Message string
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("bootstrap fetch refused (%d): %s", e.Code, e.Message)
}

// Retryable reports whether asking again later may succeed: the data may
// not be readable yet (500), or not written yet (404 while the machine is
// being created). 400, 403, 409 and 410 never change for the same request.
func (e *FetchError) Retryable() bool { return e.Code == 404 || e.Code >= 500 }

// ErrBadBootstrapData is returned when the data fetched does not match
// the checksum asked for.
var ErrBadBootstrapData = errors.New("bootstrap data does not match its checksum")

// FetchBootstrap asks the bootstrapper for a machine's bootstrap data with
// checksum (sha256:<hex>), presenting the machine's credential, and checks
// that the data fetched has that checksum. A refusal is a *FetchError; no
// answer within ctx's deadline (DefaultFetchTimeout when it has none) is
// nats.ErrTimeout or nats.ErrNoResponders.
func FetchBootstrap(ctx context.Context, nc *nats.Conn, cluster, machine, checksum, credential string) (*capnv1.BootstrapData, error) {
	if checksum == "" {
		return nil, errors.New("bootstrap fetch: a checksum is required")
	}
	reply, err := request(ctx, nc, BootstrapFetchSubject(cluster, machine), map[string]string{
		HeaderBootstrapChecksum: checksum, HeaderBootstrapCredential: credential})
	if err != nil {
		return nil, fmt.Errorf("bootstrap fetch %s/%s: %w", cluster, machine, err)
	}
	plain, err := replyseal.Open(credential, BootstrapFetchSubject(cluster, machine), reply.Data)
	if err != nil {
		return nil, fmt.Errorf("bootstrap fetch %s/%s: %w", cluster, machine, err)
	}
	data := new(capnv1.BootstrapData)
	if err := proto.Unmarshal(plain, data); err != nil {
		return nil, fmt.Errorf("bootstrap fetch %s/%s: decode reply: %w", cluster, machine, err)
	}
	if got := Checksum(data.GetData()); got != checksum || data.GetChecksum() != checksum {
		return nil, fmt.Errorf("bootstrap fetch %s/%s: %w (asked %s, data has %s)", cluster, machine, ErrBadBootstrapData, checksum, got)
	}
	return data, nil
}

// Checksum is sha256:<hex> of bootstrap data, as the bootstrapper computes it.
func Checksum(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// BootstrapCredential asks the bootstrapper, as provider, for the
// credential of its machine whose CreateMachine carries checksum. The SDK
// calls it before CreateMachine of a NodeAgentProvider; a provider has no
// other use for it. Refusals are a *FetchError with the fetch's codes
// (403: the machine is another provider's).
func BootstrapCredential(ctx context.Context, nc *nats.Conn, provider, cluster, machine, checksum string) (string, error) {
	reply, err := request(ctx, nc, keys.BootstrapCredential(provider, cluster, machine),
		map[string]string{HeaderBootstrapChecksum: checksum})
	if err != nil {
		return "", fmt.Errorf("bootstrap credential of %s/%s: %w", cluster, machine, err)
	}
	if len(reply.Data) == 0 {
		return "", fmt.Errorf("bootstrap credential of %s/%s: empty answer", cluster, machine)
	}
	return string(reply.Data), nil
}

// request sends an empty request with headers, bounded by ctx's deadline
// (DefaultFetchTimeout when it has none); a refusal is a *FetchError.
func request(ctx context.Context, nc *nats.Conn, subject string, headers map[string]string) (*nats.Msg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultFetchTimeout)
		defer cancel()
	}
	req := nats.NewMsg(subject)
	for k, v := range headers {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	reply, err := nc.RequestMsgWithContext(ctx, req)
	if err != nil {
		return nil, err
	}
	if code := reply.Header.Get(HeaderServiceErrorCode); code != "" {
		n, _ := strconv.Atoi(code)
		return nil, &FetchError{Code: n, Message: reply.Header.Get(HeaderServiceError)}
	}
	return reply, nil
}
