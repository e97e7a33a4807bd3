// Package rehome is how a machine's node agent is handed to another capn
// deployment's NATS without restarting it (capn move of a process
// cluster): the adopting provider writes the new connection into the
// machine's data dir and signals the agent (SIGHUP); the agent dials the
// new server, logs in as its machine there, and only once that login is
// accepted moves its heartbeats and etcd commands over and closes the old
// connection, then reports where it is connected. Its supervised
// processes (etcd, kube-apiserver, ...) never notice.
//
//	<data-dir>/capn-node/nats-connection.json  written by the provider: where to go
//	<data-dir>/capn-node/nats-connected.json   written by the agent: where it is
//
// Both files are the machine's own (0600, in its data dir): whoever can
// write them can already run anything as the machine. No NATS subject
// rehomes an agent, so no NATS credential (another machine's included)
// can.
package rehome

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Files under <data-dir>/<StateDir>.
const (
	StateDir = "capn-node" // the agent's own records (agent.StateDir)
	// ConnectionFile is where the agent is asked to connect.
	ConnectionFile = "nats-connection.json"
	// ConnectedFile is where the agent is connected (the last login
	// accepted).
	ConnectedFile = "nats-connected.json"
)

// Connection is a NATS connection of a machine: the URL and the files of
// credentials other than its machine login (empty: it logs in as its
// machine, as under capn dev).
type Connection struct {
	URL         string `json:"url"`
	CredsFile   string `json:"creds_file,omitempty"`
	NKeyFile    string `json:"nkey_file,omitempty"`
	TLSCA       string `json:"tls_ca,omitempty"`
	TLSCert     string `json:"tls_cert,omitempty"`
	TLSKey      string `json:"tls_key,omitempty"`
	InboxPrefix string `json:"inbox_prefix,omitempty"`
}

// Connected is what the agent reports after a login was accepted.
type Connected struct {
	URL      string    `json:"url"`
	ServerID string    `json:"server_id,omitempty"`
	At       time.Time `json:"at"`
}

// Validate says what is wrong with c, naming the field.
func (c Connection) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("url: required (nats:// or tls://)"))
	}
	for _, u := range strings.Split(c.URL, ",") {
		u = strings.TrimSpace(u)
		if u != "" && !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
			errs = append(errs, fmt.Errorf("url %q: must be nats:// or tls://", u))
		}
	}
	for _, f := range []struct{ name, v string }{{"creds_file", c.CredsFile}, {"nkey_file", c.NKeyFile},
		{"tls_ca", c.TLSCA}, {"tls_cert", c.TLSCert}, {"tls_key", c.TLSKey}} {
		if f.v != "" && !filepath.IsAbs(f.v) {
			errs = append(errs, fmt.Errorf("%s %q: must be an absolute path", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// ConnectionPath and ConnectedPath are the files of the data dir dataDir.
func ConnectionPath(dataDir string) string { return filepath.Join(dataDir, StateDir, ConnectionFile) }
func ConnectedPath(dataDir string) string  { return filepath.Join(dataDir, StateDir, ConnectedFile) }

// WriteConnection asks the agent of dataDir to connect to c (once
// signalled).
func WriteConnection(dataDir string, c Connection) error {
	if err := c.Validate(); err != nil {
		return err
	}
	return writeJSON(ConnectionPath(dataDir), c)
}

// ReadConnection reads the connection asked for; fs.ErrNotExist when
// none is.
func ReadConnection(dataDir string) (Connection, error) {
	var c Connection
	if err := readJSON(ConnectionPath(dataDir), &c); err != nil {
		return Connection{}, err
	}
	if err := c.Validate(); err != nil {
		return Connection{}, fmt.Errorf("%s: %w", ConnectionPath(dataDir), err)
	}
	return c, nil
}

// RemoveConnection withdraws the request: a signalled agent goes back to
// the connection of its command line.
func RemoveConnection(dataDir string) error {
	if err := os.Remove(ConnectionPath(dataDir)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// WriteConnected and ReadConnected are the agent's report.
func WriteConnected(dataDir string, c Connected) error { return writeJSON(ConnectedPath(dataDir), c) }

func ReadConnected(dataDir string) (Connected, error) {
	var c Connected
	return c, readJSON(ConnectedPath(dataDir), &c)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// writeJSON writes v atomically, 0600.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
