package agent

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v2"

	"github.com/capn-dev/capn/cmd/capn-node/runcmd"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// Bootstrap data formats (BootstrapData.format).
const (
	FormatCloudConfig = "cloud-config"
	FormatScript      = "script"
)

// File is one file the bootstrap data writes.
type File struct {
	// Path is absolute, as on a real machine; Apply maps it under the
	// data dir's rootfs.
	Path    string
	Content []byte
	Mode    fs.FileMode
	Owner   string
}

// Plan is what a machine's bootstrap data asks for: files to write and
// commands to run. Commands lists every command the data holds, in order;
// of them the agent runs the user's (Pre before the join, Post after it)
// when it knows the data's shape — kubeadm's runcmd (user commands under
// bootstrap.TimeoutArgv around the kubeadm line) or kube-local's node
// config — and never the join itself (Join: there is no kubeadm here).
// Data of the script provider is the user's own: listed, not run.
type Plan struct {
	Format   string
	Files    []File
	Commands []string
	Pre      []runcmd.Command
	Post     []runcmd.Command
	// Join is the kubeadm line of kubeadm data ("" otherwise).
	Join string
	// Unowned lists the files whose owner Apply could not set, and why.
	Unowned []string
}

// ErrUnsupportedFormat: the data is in a format this agent does not run
// (ignition: Flatcar and Fedora CoreOS machines run Ignition itself).
var ErrUnsupportedFormat = errors.New("bootstrap format not run by capn-node")

// File returns the file written at p, if any (the last one wins, as
// when the commands run in order).
func (p *Plan) File(at string) (File, bool) {
	for i := len(p.Files) - 1; i >= 0; i-- {
		if p.Files[i].Path == at {
			return p.Files[i], true
		}
	}
	return File{}, false
}

// Parse reads bootstrap data of format: a #cloud-config document
// (write_files with plain, b64 or base64 content; runcmd) or a script in
// the shape of capn's script bootstrap provider (files as base64 here
// documents, then chmod). It refuses anything else with the reason.
func Parse(format string, data []byte) (*Plan, error) {
	switch format {
	case FormatCloudConfig:
		p, err := parseCloudConfig(data)
		if err != nil {
			return p, err
		}
		return p, p.kubeLocalCommands()
	case FormatScript:
		return parseScript(data)
	case string(bootstrap.FormatIgnition):
		return nil, fmt.Errorf("%w: %s is for machines that boot with Ignition (Flatcar, Fedora CoreOS); capn-node runs %s (kubeadm, kube-local) and %s data", ErrUnsupportedFormat, format, FormatCloudConfig, FormatScript)
	}
	return nil, fmt.Errorf("unknown bootstrap format %q (want %s or %s)", format, FormatCloudConfig, FormatScript)
}

// kubeLocalCommands takes the commands of kube-local data from its node
// config, which the agent runs around the control plane's start.
func (p *Plan) kubeLocalCommands() error {
	f, ok := p.File(kubelocal.ConfigPath)
	if !ok {
		return nil
	}
	cfg, err := kubelocal.Parse(f.Content)
	if err != nil {
		return err
	}
	p.Pre = commandList("preCommands", cfg.PreCommands, cfg.Timeout())
	p.Post = commandList("postCommands", cfg.PostCommands, cfg.Timeout())
	p.Commands = slices.Concat(cfg.PreCommands, cfg.PostCommands, p.Commands)
	return nil
}

// NotRun are the commands of the data the agent does not run: kubeadm's
// join line, or every command of data whose shape it does not know.
func (p *Plan) NotRun() []string {
	switch {
	case p.Join != "":
		return []string{p.Join}
	case len(p.Pre)+len(p.Post) > 0:
		return nil
	}
	return p.Commands
}

func commandList(list string, lines []string, timeout time.Duration) []runcmd.Command {
	var out []runcmd.Command
	for i, l := range lines {
		out = append(out, runcmd.Command{Name: fmt.Sprintf("%s[%d]", list, i), Line: l, Timeout: timeout})
	}
	return out
}

type cloudConfig struct {
	WriteFiles []struct {
		Path        string `yaml:"path"`
		Content     string `yaml:"content"`
		Encoding    string `yaml:"encoding"`
		Permissions string `yaml:"permissions"`
		Owner       string `yaml:"owner"`
	} `yaml:"write_files"`
	RunCmd []any `yaml:"runcmd"`
}

func parseCloudConfig(data []byte) (*Plan, error) {
	if !bytes.HasPrefix(data, []byte("#cloud-config")) {
		return nil, errors.New("cloud-config: the first line is not #cloud-config")
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(data, &cc); err != nil {
		return nil, fmt.Errorf("cloud-config: %w", err)
	}
	p := &Plan{Format: FormatCloudConfig}
	var errs []error
	// kubeadm's runcmd: user commands as bootstrap.TimeoutArgv lists
	// around the kubeadm line; anything else is the user's own data.
	var user []runcmd.Command
	joinAt := -1
	for i, w := range cc.WriteFiles {
		f, err := cloudFile(w.Path, w.Content, w.Encoding, w.Permissions)
		if err != nil {
			errs = append(errs, fmt.Errorf("cloud-config: write_files[%d]: %w", i, err))
			continue
		}
		f.Owner = w.Owner
		p.Files = append(p.Files, f)
	}
	ours := true // every entry is one kubeadm's runcmd has
	for i, c := range cc.RunCmd {
		switch v := c.(type) {
		case string:
			p.Commands = append(p.Commands, v)
			if joinAt < 0 && (strings.HasPrefix(v, "kubeadm init --config ") || strings.HasPrefix(v, "kubeadm join --config ")) {
				joinAt, p.Join = len(user), v
			} else {
				ours = false
			}
		case []any:
			words := make([]string, len(v))
			for j, w := range v {
				words[j] = fmt.Sprint(w)
			}
			if line, d, ok := bootstrap.ParseTimeoutArgv(words); ok {
				p.Commands = append(p.Commands, line)
				user = append(user, runcmd.Command{Line: line, Timeout: d})
			} else {
				p.Commands = append(p.Commands, strings.Join(words, " "))
				ours = false
			}
		default:
			errs = append(errs, fmt.Errorf("cloud-config: runcmd[%d]: want a string or a list", i))
		}
	}
	if joinAt >= 0 && ours {
		for i, c := range user {
			list, n := "preCommands", i
			if i >= joinAt {
				list, n = "postCommands", i-joinAt
			}
			c.Name = fmt.Sprintf("%s[%d]", list, n)
			if i < joinAt {
				p.Pre = append(p.Pre, c)
			} else {
				p.Post = append(p.Post, c)
			}
		}
	} else {
		p.Join = ""
	}
	return p, errors.Join(errs...)
}

func cloudFile(p, content, encoding, perm string) (File, error) {
	if err := checkPath(p); err != nil {
		return File{}, err
	}
	var body []byte
	switch encoding {
	case "", "text/plain":
		body = []byte(content)
	case "b64", "base64":
		b, err := base64.StdEncoding.DecodeString(content)
		if err != nil {
			return File{}, fmt.Errorf("%s: content is not base64: %w", p, err)
		}
		body = b
	default:
		return File{}, fmt.Errorf("%s: encoding %q is not supported (want b64 or plain)", p, encoding)
	}
	mode, err := parseMode(perm)
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", p, err)
	}
	return File{Path: p, Content: body, Mode: mode}, nil
}

func checkPath(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("path %q: want a clean absolute path", p)
	}
	return nil
}

// parseMode reads an octal mode such as "0600" or "600" (default 0644).
func parseMode(s string) (fs.FileMode, error) {
	if s == "" {
		return 0o644, nil
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil || n > 0o7777 {
		return 0, fmt.Errorf("permissions %q: want an octal mode", s)
	}
	return fs.FileMode(n).Perm(), nil
}

// parseScript reads capn's script wrapper:
//
//	base64 -d > '<path>' <<'CAPN_EOF'
//	<base64 lines>
//	CAPN_EOF
//	chmod <mode> '<path>'
//
// Lines it does not know are kept as commands (never run).
func parseScript(data []byte) (*Plan, error) {
	if !bytes.HasPrefix(data, []byte("#!")) {
		return nil, errors.New("script: no #! line starts it")
	}
	p := &Plan{Format: FormatScript}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	modes := map[string]fs.FileMode{}
	for sc.Scan() {
		line := sc.Text()
		if target, ok := strings.CutPrefix(line, "base64 -d > "); ok {
			target, ok = strings.CutSuffix(target, " <<'CAPN_EOF'")
			if !ok {
				return nil, fmt.Errorf("script: unknown here document in %q", line)
			}
			file, err := unquote(target)
			if err != nil {
				return nil, fmt.Errorf("script: %w", err)
			}
			if err := checkPath(file); err != nil {
				return nil, fmt.Errorf("script: %w", err)
			}
			var enc strings.Builder
			closed := false
			for sc.Scan() {
				if sc.Text() == "CAPN_EOF" {
					closed = true
					break
				}
				enc.WriteString(sc.Text())
			}
			if !closed {
				return nil, fmt.Errorf("script: here document of %s is not closed", file)
			}
			body, err := base64.StdEncoding.DecodeString(enc.String())
			if err != nil {
				return nil, fmt.Errorf("script: %s: content is not base64: %w", file, err)
			}
			p.Files = append(p.Files, File{Path: file, Content: body, Mode: 0o644})
			continue
		}
		if rest, ok := strings.CutPrefix(line, "chmod "); ok {
			mode, target, found := strings.Cut(rest, " ")
			if file, err := unquote(target); found && err == nil {
				if m, err := parseMode(mode); err == nil {
					modes[file] = m
					continue
				}
			}
		}
		if strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "#") {
			p.Commands = append(p.Commands, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("script: %w", err)
	}
	for i := range p.Files {
		if m, ok := modes[p.Files[i].Path]; ok {
			p.Files[i].Mode = m
		}
	}
	return p, nil
}

// unquote undoes shell single quoting; a quote inside is written as quote, backslash, quote, quote.
func unquote(s string) (string, error) {
	if len(s) < 2 || s[0] != '\'' || s[len(s)-1] != '\'' {
		return "", fmt.Errorf("%q is not single-quoted", s)
	}
	return strings.ReplaceAll(s[1:len(s)-1], `'\''`, `'`), nil
}
