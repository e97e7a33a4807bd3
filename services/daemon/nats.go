package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
)

// firstRetry is the first wait between connection attempts; it doubles up
// to NATSConfig.ReconnectWait.
const firstRetry = 100 * time.Millisecond

// Connect connects to NATS as cfg says, naming the connection name. The
// first connection is retried with backoff until it succeeds or ctx ends,
// except when the server refuses the credentials (retrying cannot help)
// or an option is bad (a file cannot be read). Once connected, the
// connection reconnects forever with backoff and buffers publishes while
// disconnected. It logs each disconnect, reconnect and close, and every
// asynchronous error: permission violations (with the subject; a denied
// publish does not fail, so this log is where it shows), slow consumers
// and lame-duck notices. extra options are applied last (e.g.
// nats.InProcessServer). The caller closes or drains the connection.
func Connect(ctx context.Context, cfg NATSConfig, name string, log zerolog.Logger, extra ...nats.Option) (*nats.Conn, error) {
	cfg = Config{NATS: cfg}.WithDefaults().NATS
	o := nats.GetDefaultOptions()
	for _, opt := range append(cfg.options(name, log), extra...) {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("nats options: %w", err)
		}
	}
	for _, u := range strings.Split(cfg.URL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			o.Servers = append(o.Servers, u)
		}
	}
	where := redactURLs(cfg.URL)
	if o.InProcessServer != nil {
		where = "in-process server"
	}
	for attempt := 1; ; attempt++ {
		nc, err := o.Connect()
		if err == nil {
			ev := log.Info().Str("server_id", nc.ConnectedServerId()).Int("attempts", attempt)
			if o.InProcessServer != nil {
				ev = ev.Bool("in_process", true)
			} else {
				ev = ev.Str("nats_url", nc.ConnectedUrlRedacted())
			}
			ev.Msg("connected to NATS")
			return nc, nil
		}
		if isAuthError(err) {
			return nil, fmt.Errorf("connect to NATS at %s: credentials refused: %w", where, err)
		}
		wait := backoff(attempt, cfg.ReconnectWait)
		log.Warn().Err(err).Str("nats_url", where).Int("attempt", attempt).Dur("retry_in", wait).
			Msg("cannot connect to NATS, retrying")
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to NATS at %s: %w (last error: %v)", where, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// options are the nats options cfg stands for, with logging handlers.
func (cfg NATSConfig) options(name string, log zerolog.Logger) []nats.Option {
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(cfg.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration { return backoff(attempts, cfg.ReconnectWait) }),
		// Notice a dead server in about a minute rather than the default
		// four, so that a service's readiness tells the truth sooner.
		nats.PingInterval(20 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // the closed handler says it
			}
			log.Warn().Err(err).Msg("disconnected from NATS, reconnecting")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info().Str("nats_url", nc.ConnectedUrlRedacted()).Uint64("reconnects", nc.Reconnects).Msg("reconnected to NATS")
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			ev := log.Info()
			if err := nc.LastError(); err != nil {
				ev = ev.AnErr("last_error", err)
			}
			ev.Msg("NATS connection closed")
		}),
		nats.LameDuckModeHandler(func(nc *nats.Conn) {
			log.Warn().Str("nats_url", nc.ConnectedUrlRedacted()).Msg("NATS server entering lame duck mode, will move to another")
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			logAsyncError(log, sub, err)
		}),
	}
	switch {
	case cfg.User != "" && cfg.PasswordFile != "":
		user, file := cfg.User, cfg.PasswordFile
		opts = append(opts, nats.UserInfoHandler(func() (string, string) {
			b, err := os.ReadFile(file)
			if err != nil {
				log.Warn().Err(err).Str("password_file", file).Msg("cannot read the NATS password file")
			}
			return user, strings.TrimSpace(string(b))
		}))
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	case cfg.CredsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	case cfg.NKeySeedFile != "":
		opts = append(opts, func(o *nats.Options) error {
			opt, err := nats.NkeyOptionFromSeed(cfg.NKeySeedFile)
			if err != nil {
				return err
			}
			return opt(o)
		})
	}
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(cfg.InboxPrefix))
	}
	return opts
}

func logAsyncError(log zerolog.Logger, sub *nats.Subscription, err error) {
	var ev *zerolog.Event
	switch {
	case errors.Is(err, nats.ErrPermissionViolation):
		ev = log.Error().Str("reason", "permission_violation")
		// The server names the operation and subject only in its text.
		if m := violationRe.FindStringSubmatch(err.Error()); m != nil {
			ev = ev.Str("operation", strings.ToLower(m[1])).Str("subject", m[2])
			sub = nil
		}
	case errors.Is(err, nats.ErrSlowConsumer):
		ev = log.Warn().Str("reason", "slow_consumer")
		if sub != nil {
			if msgs, _, perr := sub.Pending(); perr == nil {
				ev = ev.Int("pending_msgs", msgs)
			}
		}
	default:
		ev = log.Error()
	}
	if sub != nil {
		ev = ev.Str("subject", sub.Subject)
	}
	ev.Err(err).Msg("NATS error")
}

// violationRe finds the operation and subject in a server's permissions
// violation: Permissions Violation for Publish to "a.b".
var violationRe = regexp.MustCompile(`(Publish|Subscription) to "([^"]+)"`)

// backoff is the wait before attempt n (1-based): 100ms doubling up to
// limit, minus up to a fifth at random so that clients spread out.
func backoff(n int, limit time.Duration) time.Duration {
	d := firstRetry
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// isAuthError tells whether the server refused a connection's credentials.
// The first connection reports it as the server's -ERR text, not as
// nats.ErrAuthorization.
func isAuthError(err error) bool {
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) {
		return true
	}
	s := strings.ToLower(err.Error())
	for _, e := range []string{nats.AUTHORIZATION_ERR, nats.AUTHENTICATION_EXPIRED_ERR,
		nats.AUTHENTICATION_REVOKED_ERR, nats.ACCOUNT_AUTHENTICATION_EXPIRED_ERR} {
		if strings.Contains(s, e) {
			return true
		}
	}
	return false
}
