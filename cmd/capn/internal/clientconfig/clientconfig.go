// Package clientconfig is the capn client configuration file: the
// gateway's URL and the bearer token to send it, in YAML. capn dev writes
// it (to <data-dir>/client.yaml and, as the user's default, to
// ${XDG_CONFIG_HOME:-~/.config}/capn/config.yaml); the commands that talk
// to the gateway read it (docs/cli.md, Connecting to a gateway).
package clientconfig

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v2"
)

// Config is a client configuration file.
type Config struct {
	Server string `yaml:"server"`
	Token  string `yaml:"token,omitempty"`
}

// Read reads and checks a client configuration file. Unknown keys are
// errors, so a typo does not silently send no token.
func Read(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		return c, fmt.Errorf("client config %s: %w", path, err)
	}
	c.Server = strings.TrimSpace(c.Server)
	c.Token = strings.TrimSpace(c.Token)
	if c.Server != "" {
		if err := CheckServerURL(c.Server); err != nil {
			return c, fmt.Errorf("client config %s: server: %w", path, err)
		}
	}
	return c, nil
}

// Encode renders c as the file capn dev writes, comment first.
func (c Config) Encode(comment string) []byte {
	b, _ := yaml.Marshal(c) // two strings: cannot fail
	var out strings.Builder
	for line := range strings.SplitSeq(strings.TrimRight(comment, "\n"), "\n") {
		out.WriteString("# " + line + "\n")
	}
	out.Write(b)
	return []byte(out.String())
}

// CheckServerURL accepts http(s)://host[:port][/path].
func CheckServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s)://host:port URL", s)
	}
	return nil
}

// DefaultPath is ${XDG_CONFIG_HOME:-$HOME/.config}/capn/config.yaml, or ""
// when neither variable is set (then there is no default config). lookup
// reads the environment.
func DefaultPath(lookup func(string) (string, bool)) string {
	if dir, ok := lookup("XDG_CONFIG_HOME"); ok && filepath.IsAbs(dir) {
		return filepath.Join(dir, "capn", "config.yaml")
	}
	if home, ok := lookup("HOME"); ok && home != "" {
		return filepath.Join(home, ".config", "capn", "config.yaml")
	}
	return ""
}

// WriteAtomic replaces path with data, so a reader never sees half a
// file; the file has mode perm. capn writes every file a client reads
// with it: a client config, capn dev's admin token, a kubeconfig.
func WriteAtomic(path string, data []byte, perm os.FileMode) error {
	if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, data) {
		return os.Chmod(path, perm)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
