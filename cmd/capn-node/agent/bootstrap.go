package agent

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v2"
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
// commands to run (never run by this agent: there is no kubeadm).
type Plan struct {
	Format   string
	Files    []File
	Commands []string
}

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
		return parseCloudConfig(data)
	case FormatScript:
		return parseScript(data)
	}
	return nil, fmt.Errorf("unknown bootstrap format %q (want %s or %s)", format, FormatCloudConfig, FormatScript)
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
	for i, w := range cc.WriteFiles {
		f, err := cloudFile(w.Path, w.Content, w.Encoding, w.Permissions)
		if err != nil {
			errs = append(errs, fmt.Errorf("cloud-config: write_files[%d]: %w", i, err))
			continue
		}
		f.Owner = w.Owner
		p.Files = append(p.Files, f)
	}
	for i, c := range cc.RunCmd {
		switch v := c.(type) {
		case string:
			p.Commands = append(p.Commands, v)
		case []any:
			words := make([]string, len(v))
			for j, w := range v {
				words[j] = fmt.Sprint(w)
			}
			p.Commands = append(p.Commands, strings.Join(words, " "))
		default:
			errs = append(errs, fmt.Errorf("cloud-config: runcmd[%d]: want a string or a list", i))
		}
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
