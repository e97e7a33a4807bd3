// Package cloudconfig runs the subset of cloud-init's #cloud-config that
// capn's bootstrap providers render (services/bootstrapper/bootstrap/
// cloudinit): write_files, then runcmd, on the machine itself — what
// cloud-init's write_files and scripts_user modules do on a cloud machine,
// for machines that have no cloud-init (a real node of this host, a
// bring-your-own Linux host run by capn-node).
//
// The subset, and how each part runs:
//   - write_files: path (absolute, clean), content, encoding ("", text/plain,
//     b64, base64), permissions (octal, default 0644), owner ("user[:group]",
//     names or ids; default root:root). Parent directories are made (0755);
//     each file is written to a temporary file beside it, given its mode and
//     owner, and renamed over the path: a reader never sees it half-written.
//   - runcmd: each entry in order, as cloud-init's runcmd script runs it: a
//     string is a shell line (/bin/sh -c), a list is its words shell-quoted
//     into one line. Like that script (sh without -e), a command that fails
//     does not stop the ones after it — capn's kubeadm entry chains its own
//     steps with && and writes the success sentinel last. Run reports every
//     command's result and fails when any failed.
//
// Any other top-level key, or any other write_files field, is refused with
// its name: a runner that skipped part of the data would leave the machine
// other than the data says.
package cloudconfig

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v2"

	"github.com/capn-dev/capn/cmd/capn-node/runcmd"
)

// WriteFile is one write_files entry, its content decoded.
type WriteFile struct {
	Path        string
	Content     []byte
	Permissions os.FileMode
	// Owner is "user[:group]" as written ("" means root:root).
	Owner string
}

// Config is the part of a #cloud-config document this package runs.
type Config struct {
	WriteFiles []WriteFile
	// RunCmd are the runcmd entries as shell lines.
	RunCmd []string
}

type document struct {
	WriteFiles []struct {
		Path        string `yaml:"path"`
		Content     string `yaml:"content"`
		Encoding    string `yaml:"encoding"`
		Permissions string `yaml:"permissions"`
		Owner       string `yaml:"owner"`
	} `yaml:"write_files"`
	RunCmd []any `yaml:"runcmd"`
}

// Parse reads a #cloud-config document. It refuses (naming the key or
// entry, and why) a document that does not start with #cloud-config,
// keys or fields outside the subset, paths that are not clean and
// absolute, unknown encodings and bad modes; nothing is run then.
func Parse(data []byte) (*Config, error) {
	if !bytes.HasPrefix(data, []byte("#cloud-config\n")) && !bytes.Equal(data, []byte("#cloud-config")) {
		return nil, errors.New("cloud-config: the first line must be #cloud-config")
	}
	var doc document
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return nil, fmt.Errorf("cloud-config: %w (capn-node runs write_files with path, content, encoding, permissions, owner, and runcmd)", err)
	}
	var errs []error
	c := &Config{}
	for i, w := range doc.WriteFiles {
		at := fmt.Sprintf("write_files[%d]", i)
		if !path.IsAbs(w.Path) || path.Clean(w.Path) != w.Path || w.Path == "/" {
			errs = append(errs, fmt.Errorf("%s.path %q: want a clean absolute file path", at, w.Path))
			continue
		}
		var content []byte
		switch w.Encoding {
		case "", "text/plain":
			content = []byte(w.Content)
		case "b64", "base64":
			b, err := base64.StdEncoding.DecodeString(w.Content)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s (%s).content: not base64: %w", at, w.Path, err))
				continue
			}
			content = b
		default:
			errs = append(errs, fmt.Errorf("%s (%s).encoding %q: want b64, base64, text/plain or none", at, w.Path, w.Encoding))
			continue
		}
		mode := os.FileMode(0o644)
		if w.Permissions != "" {
			n, err := strconv.ParseUint(w.Permissions, 8, 32)
			if err != nil || n > 0o7777 {
				errs = append(errs, fmt.Errorf("%s (%s).permissions %q: want an octal mode such as 0600", at, w.Path, w.Permissions))
				continue
			}
			mode = fileMode(n)
		}
		c.WriteFiles = append(c.WriteFiles, WriteFile{Path: w.Path, Content: content, Permissions: mode, Owner: w.Owner})
	}
	for i, e := range doc.RunCmd {
		switch v := e.(type) {
		case string:
			c.RunCmd = append(c.RunCmd, v)
		case []any:
			words := make([]string, len(v))
			for j, w := range v {
				switch w.(type) {
				case string, int, bool, float64:
					words[j] = fmt.Sprint(w)
				default:
					errs = append(errs, fmt.Errorf("runcmd[%d][%d]: a %s, want a word", i, j, kind(w)))
				}
			}
			c.RunCmd = append(c.RunCmd, ShellJoin(words))
		default:
			errs = append(errs, fmt.Errorf("runcmd[%d]: a %s, want a string or a list of words", i, kind(e)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("cloud-config: %w", err)
	}
	return c, nil
}

// kind names a YAML value's kind for an error.
func kind(v any) string {
	switch v.(type) {
	case map[any]any:
		return "mapping"
	case []any:
		return "list"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// fileMode turns octal Unix bits into an os.FileMode (setuid, setgid and
// sticky moved to Go's bits).
func fileMode(n uint64) os.FileMode {
	m := os.FileMode(n & 0o777)
	if n&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if n&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if n&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

// ShellJoin quotes words for sh, as cloud-init writes a runcmd list.
func ShellJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
			q[i] = w
			continue
		}
		q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// Runner runs a Config on this machine.
type Runner struct {
	// Root is where write_files paths are rooted: "/" (or "") on a
	// machine. The commands always see the machine's real file system.
	Root string
	// Commands runs the runcmd lines (its Dir, Env, Log, Output); the
	// zero value runs /bin/sh -c in the current directory.
	Commands runcmd.Runner
	// Timeout bounds each runcmd entry (0: none; capn's user commands
	// carry their own timeout(1)).
	Timeout time.Duration
	// Log, when set, gets one line per step.
	Log io.Writer
}

// Report is what a run did.
type Report struct {
	Files    []string
	Commands []runcmd.Result
}

// Run writes the files, then runs every command in order. It stops before
// the commands when a file cannot be written (the commands would run on a
// machine without them); a failed command is reported and the next one
// runs, as under cloud-init. The error names every failure.
func (r *Runner) Run(ctx context.Context, c *Config) (Report, error) {
	var rep Report
	root := r.Root
	if root == "" {
		root = "/"
	}
	for i, f := range c.WriteFiles {
		if err := writeFile(root, f); err != nil {
			return rep, fmt.Errorf("write_files[%d] %s: %w", i, f.Path, err)
		}
		rep.Files = append(rep.Files, f.Path)
		r.logf("wrote %s (%s, %d bytes)", f.Path, f.Permissions, len(f.Content))
	}
	var failed []string
	for i, line := range c.RunCmd {
		res := r.Commands.Run(ctx, runcmd.Command{Name: fmt.Sprintf("runcmd[%d]", i), Line: line, Timeout: r.Timeout})
		rep.Commands = append(rep.Commands, res)
		r.logf("%s", res.Message())
		if !res.OK() {
			failed = append(failed, res.Message())
		}
		if ctx.Err() != nil {
			return rep, fmt.Errorf("stopped: %w; %s", ctx.Err(), strings.Join(failed, "; "))
		}
	}
	if len(failed) > 0 {
		return rep, fmt.Errorf("%d of %d runcmd entries failed: %s", len(failed), len(c.RunCmd), strings.Join(failed, "; "))
	}
	return rep, nil
}

func (r *Runner) logf(format string, a ...any) {
	if r.Log != nil {
		fmt.Fprintf(r.Log, "cloud-config: "+format+"\n", a...)
	}
}

// writeFile writes f under root: parents made, a temporary file given
// the content, mode and owner, then renamed over the path.
func writeFile(root string, f WriteFile) error {
	uid, gid, err := lookupOwner(f.Owner)
	if err != nil {
		return err
	}
	p := filepath.Join(root, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".capn-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(f.Content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// Owner first: chown clears setuid and setgid.
	if err := os.Lchown(tmp.Name(), uid, gid); err != nil {
		return fmt.Errorf("owner %q: %w", f.Owner, err)
	}
	if err := os.Chmod(tmp.Name(), f.Permissions); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// lookupOwner reads "user[:group]" (names or numeric ids; "" is
// root:root; a user alone gets the user's primary group).
func lookupOwner(owner string) (uid, gid int, err error) {
	if owner == "" {
		return 0, 0, nil
	}
	name, group, hasGroup := strings.Cut(owner, ":")
	if n, err := strconv.Atoi(name); err == nil {
		uid, gid = n, n
	} else {
		u, err := user.Lookup(name)
		if err != nil {
			return 0, 0, fmt.Errorf("owner %q: %w", owner, err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	if hasGroup {
		if n, err := strconv.Atoi(group); err == nil {
			gid = n
		} else {
			g, err := user.LookupGroup(group)
			if err != nil {
				return 0, 0, fmt.Errorf("owner %q: %w", owner, err)
			}
			gid, _ = strconv.Atoi(g.Gid)
		}
	}
	return uid, gid, nil
}
