package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Defaults of the runtime's settings.
const (
	DefaultNATSURL = "nats://127.0.0.1:4222"
	// DefaultHTTPAddr is loopback: the ops endpoints are unauthenticated
	// (metrics name clusters and machines). A container binds its interface
	// with an explicit --http-addr (docker-compose.yaml sets 0.0.0.0:8081).
	DefaultHTTPAddr        = "127.0.0.1:8081"
	DefaultLogLevel        = "info"
	DefaultLogFormat       = LogFormatAuto
	DefaultConnectTimeout  = 5 * time.Second
	DefaultReconnectWait   = 2 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
	// HTTPOff as the HTTP address serves no ops endpoints.
	HTTPOff = "off"
)

// Log formats.
const (
	LogFormatJSON    = "json"
	LogFormatConsole = "console"
	// LogFormatAuto is console when the log goes to a terminal, JSON otherwise.
	LogFormatAuto = "auto"
)

var (
	logLevels   = []string{"trace", "debug", "info", "warn", "error"}
	logFormats  = []string{LogFormatJSON, LogFormatConsole, LogFormatAuto}
	natsSchemes = []string{"nats", "tls"}
	serviceName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
)

// Config is what every capn program is configured with. Each setting comes
// from a flag, else from its CAPN_* environment variable, else from its
// default (flag > env > default). An empty field means its default
// (WithDefaults); Validate checks the result.
type Config struct {
	// Name is the service's name (set by the program, not by a flag): the
	// service=<name> of logs and metrics and the NATS connection name.
	Name string
	NATS NATSConfig
	// HTTPAddr is where /healthz, /readyz and /metrics are served
	// (host:port; port 0 picks one); "off" serves nothing.
	HTTPAddr string
	// LogLevel is trace|debug|info|warn|error.
	LogLevel string
	// LogFormat is json|console|auto (console on a terminal, else JSON).
	LogFormat string
	// Replicas of every stream and bucket when provisioning (1..5).
	Replicas int
	// SkipProvision skips creating streams and buckets at start, for a
	// NATS user that may not manage JetStream (someone else provisions).
	SkipProvision bool
	// ShutdownTimeout bounds a graceful stop: the service's return, the
	// connection's drain and the HTTP server's shutdown.
	ShutdownTimeout time.Duration

	fs *flag.FlagSet // where RegisterFlags registered, to tell explicit flags
}

// NATSConfig says how to reach NATS and who to be there. At most one of
// user/password, token, creds file and nkey seed file authenticates; TLS
// files are independent of them.
type NATSConfig struct {
	// URL is one server URL or a comma-separated list (nats:// or tls://).
	URL string
	// User and Password authenticate with a plain user.
	User, Password string
	// PasswordFile holds the user's password instead of Password; it is
	// read at every (re)connect, so it may appear or change later (a
	// machine's secret, written by capn-node after its bootstrap fetch).
	PasswordFile string
	// Token authenticates with a token.
	Token string
	// CredsFile is a decentralized-auth credentials file (JWT and seed).
	CredsFile string
	// NKeySeedFile holds a user's nkey seed.
	NKeySeedFile string
	// TLSCert and TLSKey are the client certificate and key (both or
	// neither); TLSCA verifies the server. Any of them requires TLS.
	TLSCert, TLSKey, TLSCA string
	// ConnectTimeout bounds one dial and handshake.
	ConnectTimeout time.Duration
	// ReconnectWait is the longest wait between connection attempts; the
	// wait doubles from 100ms up to it, with jitter.
	ReconnectWait time.Duration
	// InboxPrefix, when set, replaces _INBOX as the prefix of the
	// connection's reply subjects (nats.CustomInboxPrefix): a user allowed
	// to subscribe to _INBOX_<user>.> only must use _INBOX_<user>. Empty
	// is NATS's default, _INBOX.
	InboxPrefix string
}

// WithDefaults returns c with every empty setting set to its default.
func (c Config) WithDefaults() Config {
	setDefault(&c.NATS.URL, DefaultNATSURL)
	setDefault(&c.HTTPAddr, DefaultHTTPAddr)
	setDefault(&c.LogLevel, DefaultLogLevel)
	setDefault(&c.LogFormat, DefaultLogFormat)
	setDefault(&c.Replicas, 1)
	setDefault(&c.ShutdownTimeout, DefaultShutdownTimeout)
	setDefault(&c.NATS.ConnectTimeout, DefaultConnectTimeout)
	setDefault(&c.NATS.ReconnectWait, DefaultReconnectWait)
	return c
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// flags binds the runtime's settings to c's fields.
func (c *Config) flags() []Flag {
	n := &c.NATS
	return []Flag{
		{"nats-url", "CAPN_NATS_URL", "NATS server `url`(s), comma-separated (nats:// or tls://)", StringValue(&n.URL)},
		{"nats-user", "CAPN_NATS_USER", "NATS `user` (with --nats-password)", StringValue(&n.User)},
		{"nats-password", "CAPN_NATS_PASSWORD", "NATS `password` (prefer the environment variable)", StringValue(&n.Password)},
		{"nats-password-file", "CAPN_NATS_PASSWORD_FILE", "`file` with the NATS user's password, read at every connect (a machine's secret: capn-node's <data-dir>/capn-node/machine-secret)", StringValue(&n.PasswordFile)},
		{"nats-token", "CAPN_NATS_TOKEN", "NATS `token` (prefer the environment variable)", StringValue(&n.Token)},
		{"nats-creds", "CAPN_NATS_CREDS", "NATS credentials `file` (JWT and nkey seed)", StringValue(&n.CredsFile)},
		{"nats-nkey", "CAPN_NATS_NKEY", "`file` with the NATS user's nkey seed", StringValue(&n.NKeySeedFile)},
		{"nats-tls-cert", "CAPN_NATS_TLS_CERT", "client certificate `file` for TLS to NATS (with --nats-tls-key)", StringValue(&n.TLSCert)},
		{"nats-tls-key", "CAPN_NATS_TLS_KEY", "client key `file` for TLS to NATS", StringValue(&n.TLSKey)},
		{"nats-tls-ca", "CAPN_NATS_TLS_CA", "CA `file` that verifies the NATS server", StringValue(&n.TLSCA)},
		{"nats-connect-timeout", "CAPN_NATS_CONNECT_TIMEOUT", "`timeout` of one NATS dial and handshake", DurationValue(&n.ConnectTimeout)},
		{"nats-reconnect-wait", "CAPN_NATS_RECONNECT_WAIT", "longest `wait` between NATS connection attempts", DurationValue(&n.ReconnectWait)},
		{"nats-inbox-prefix", "CAPN_NATS_INBOX_PREFIX", "`prefix` of reply subjects instead of _INBOX (a deployment's users: _INBOX_<user>)", StringValue(&n.InboxPrefix)},
		{"http-addr", "CAPN_HTTP_ADDR", "`address` of /healthz /readyz /metrics (host:port, or \"off\")", StringValue(&c.HTTPAddr)},
		{"log-level", "CAPN_LOG_LEVEL", "log `level`: " + strings.Join(logLevels, "|"), StringValue(&c.LogLevel)},
		{"log-format", "CAPN_LOG_FORMAT", "log `format`: json|console|auto (console on a terminal)", StringValue(&c.LogFormat)},
		{"stream-replicas", "CAPN_STREAM_REPLICAS", "`replicas` of streams and buckets when provisioning (1..5)", IntValue(&c.Replicas)},
		{"skip-provision", "CAPN_SKIP_PROVISION", "do not create streams and buckets at start", BoolValue(&c.SkipProvision)},
		{"shutdown-timeout", "CAPN_SHUTDOWN_TIMEOUT", "`bound` of a graceful shutdown", DurationValue(&c.ShutdownTimeout)},
	}
}

// flagFor returns the flag and variable names of the field p points to.
func (c *Config) flagFor(p any) (string, string) {
	for _, f := range c.flags() {
		if same(f.Value, p) {
			return f.Name, f.Env
		}
	}
	panic("runtime: no flag for field")
}

func same(v flag.Value, p any) bool {
	switch v := v.(type) {
	case *stringValue:
		q, ok := p.(*string)
		return ok && (*string)(v) == q
	case *intValue:
		q, ok := p.(*int)
		return ok && (*int)(v) == q
	case *boolValue:
		q, ok := p.(*bool)
		return ok && (*bool)(v) == q
	case *durationValue:
		q, ok := p.(*time.Duration)
		return ok && (*time.Duration)(v) == q
	}
	return false
}

// RegisterFlags sets c's empty settings to their defaults and registers
// a flag for each of them on fs: --nats-url, --nats-user,
// --nats-password, --nats-token, --nats-creds, --nats-nkey,
// --nats-tls-cert, --nats-tls-key, --nats-tls-ca, --nats-connect-timeout,
// --nats-reconnect-wait, --nats-inbox-prefix, --http-addr, --log-level, --log-format,
// --stream-replicas, --skip-provision, --shutdown-timeout. Each one's
// environment variable is CAPN_ and its name in upper snake case.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	*c = c.WithDefaults()
	c.fs = fs
	BindFlags(fs, c.flags()...)
}

// ApplyEnv sets every setting whose flag was not given explicitly from
// its CAPN_* environment variable, read with lookup (os.LookupEnv).
// Precedence is flag > env > default whether it runs before or after the
// flags are parsed. It reports every unparsable variable at once.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	return ApplyFlagEnv(c.fs, lookup, c.flags()...)
}

// Validate reports every problem of c (after WithDefaults) at once, joined
// with errors.Join; each is a *FieldError naming the flag, the variable,
// the bad value and what is allowed. Files are checked to exist and be
// readable, and TLS files to parse.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	bad := func(p any, value, problem string, err error) {
		name, env := c.flagFor(p)
		errs = append(errs, &FieldError{Flag: name, Env: env, Value: value, Problem: problem, Err: err})
	}
	if !serviceName.MatchString(c.Name) {
		errs = append(errs, fmt.Errorf("service name %q: must be lower-case letters, digits and dashes, starting with a letter", c.Name))
	}
	if c.HTTPAddr != HTTPOff {
		if err := checkHostPort(c.HTTPAddr); err != nil {
			bad(&c.HTTPAddr, c.HTTPAddr, `must be host:port (port 0..65535; empty host: all interfaces) or "off"`, err)
		}
	}
	if !slices.Contains(logLevels, c.LogLevel) {
		bad(&c.LogLevel, c.LogLevel, "must be one of "+strings.Join(logLevels, "|"), nil)
	}
	if !slices.Contains(logFormats, c.LogFormat) {
		bad(&c.LogFormat, c.LogFormat, "must be one of "+strings.Join(logFormats, "|"), nil)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		bad(&c.Replicas, strconv.Itoa(c.Replicas), "must be 1..5 (JetStream's limit)", nil)
	}
	if c.ShutdownTimeout < 0 {
		bad(&c.ShutdownTimeout, c.ShutdownTimeout.String(), "must be positive", nil)
	}
	c.validateNATS(bad)
	return errors.Join(errs...)
}

func (c *Config) validateNATS(bad func(p any, value, problem string, err error)) {
	n := &c.NATS
	for _, u := range strings.Split(n.URL, ",") {
		if err := checkNATSURL(strings.TrimSpace(u)); err != nil {
			bad(&n.URL, redactURLs(n.URL), "must be nats://host:port or tls://host:port, comma-separated: "+err.Error(), err)
			break
		}
	}
	const hidden = "(hidden)"
	switch {
	case n.Password != "" && n.PasswordFile != "":
		bad(&n.PasswordFile, n.PasswordFile, "give the password or a file with it, not both (--nats-password)", nil)
	case n.User != "" && n.Password == "" && n.PasswordFile == "":
		bad(&n.User, n.User, "a user needs a password (--nats-password, CAPN_NATS_PASSWORD or --nats-password-file)", nil)
	case n.User == "" && n.Password != "":
		bad(&n.Password, hidden, "a password needs a user (--nats-user or CAPN_NATS_USER)", nil)
	case n.User == "" && n.PasswordFile != "":
		bad(&n.PasswordFile, n.PasswordFile, "a password file needs a user (--nats-user or CAPN_NATS_USER)", nil)
	}
	type method struct {
		p     *string
		name  string
		value string
	}
	var methods []method
	if n.User != "" || n.Password != "" || n.PasswordFile != "" {
		methods = append(methods, method{&n.User, "user/password", n.User})
	}
	if n.Token != "" {
		methods = append(methods, method{&n.Token, "token", hidden})
	}
	if n.CredsFile != "" {
		methods = append(methods, method{&n.CredsFile, "creds file", n.CredsFile})
	}
	if n.NKeySeedFile != "" {
		methods = append(methods, method{&n.NKeySeedFile, "nkey seed file", n.NKeySeedFile})
	}
	if len(methods) > 1 {
		names := make([]string, len(methods))
		for i, m := range methods {
			names[i] = m.name
		}
		bad(methods[0].p, methods[0].value, "use one way to authenticate, not "+strings.Join(names, " and "), nil)
	}
	unreadable := map[*string]bool{}
	for _, f := range []*string{&n.CredsFile, &n.NKeySeedFile, &n.TLSCert, &n.TLSKey, &n.TLSCA} {
		if *f == "" {
			continue
		}
		if err := checkReadable(*f); err != nil {
			bad(f, *f, "must be a readable file: "+err.Error(), err)
			unreadable[f] = true
		}
	}
	switch {
	case n.TLSCert != "" && n.TLSKey == "":
		bad(&n.TLSCert, n.TLSCert, "a TLS certificate needs its key (--nats-tls-key or CAPN_NATS_TLS_KEY)", nil)
	case n.TLSCert == "" && n.TLSKey != "":
		bad(&n.TLSKey, n.TLSKey, "a TLS key needs its certificate (--nats-tls-cert or CAPN_NATS_TLS_CERT)", nil)
	case n.TLSCert != "" && !unreadable[&n.TLSCert] && !unreadable[&n.TLSKey]:
		if _, err := tls.LoadX509KeyPair(n.TLSCert, n.TLSKey); err != nil {
			bad(&n.TLSCert, n.TLSCert, "certificate and key (--nats-tls-key) do not load as a pair: "+err.Error(), err)
		}
	}
	if n.TLSCA != "" && !unreadable[&n.TLSCA] {
		if pem, err := os.ReadFile(n.TLSCA); err == nil && !x509.NewCertPool().AppendCertsFromPEM(pem) {
			bad(&n.TLSCA, n.TLSCA, "must hold PEM certificates; found none", nil)
		}
	}
	if n.ConnectTimeout < 0 {
		bad(&n.ConnectTimeout, n.ConnectTimeout.String(), "must be positive", nil)
	}
	if n.ReconnectWait < 0 {
		bad(&n.ReconnectWait, n.ReconnectWait.String(), "must be positive", nil)
	}
	if n.InboxPrefix != "" {
		if err := CheckInboxPrefix(n.InboxPrefix); err != nil {
			bad(&n.InboxPrefix, n.InboxPrefix, err.Error(), nil)
		}
	}
}

// Validate reports every problem of n at once, as Config.Validate does:
// each a *FieldError naming the runtime's --nats-* flag and CAPN_NATS_*
// variable. A program that binds the same names to its own NATSConfig
// (capn-node) checks it with this.
func (n NATSConfig) Validate() error {
	c := Config{NATS: n}.WithDefaults()
	var errs []error
	c.validateNATS(func(p any, value, problem string, err error) {
		name, env := c.flagFor(p)
		errs = append(errs, &FieldError{Flag: name, Env: env, Value: value, Problem: problem, Err: err})
	})
	return errors.Join(errs...)
}

// CheckInboxPrefix says what is wrong with p as a NATS inbox prefix (the
// subject replies come back on is <p>.<random>): it must be a subject of
// non-empty dot-separated tokens, with no wildcard (* or >) and no
// whitespace. nil means it is good.
func CheckInboxPrefix(p string) error {
	switch {
	case p == "":
		return errors.New("must not be empty")
	case strings.ContainsAny(p, "*>"):
		return errors.New("must not contain a wildcard (* or >): it is the start of reply subjects, e.g. _INBOX_<user>")
	case strings.IndexFunc(p, unicode.IsSpace) >= 0:
		return errors.New("must not contain whitespace")
	case strings.HasPrefix(p, "."), strings.HasSuffix(p, "."):
		return errors.New("must not start or end with a dot: NATS appends .<id> itself")
	case strings.Contains(p, ".."):
		return errors.New("must not contain an empty token (..)")
	}
	return nil
}

func checkNATSURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.Unwrap(err) // url.Error repeats the URL, maybe with a password
	}
	if !slices.Contains(natsSchemes, u.Scheme) {
		return fmt.Errorf("scheme %q is not nats or tls", u.Scheme)
	}
	if u.Hostname() == "" {
		return errors.New("no host")
	}
	return nil
}

func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not 0..65535", port)
	}
	return nil
}

func checkReadable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() {
		return errors.New("is a directory")
	}
	return nil
}

// redactURLs hides passwords in a comma-separated URL list.
func redactURLs(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil {
			parts[i] = u.Redacted()
		} else if strings.Contains(p, "@") {
			parts[i] = "(unparsable, hidden)"
		}
	}
	return strings.Join(parts, ",")
}
