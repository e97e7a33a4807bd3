// Package cloudinit writes cloud-init "#cloud-config" documents for
// bootstrap providers: write_files (every file base64-encoded, so any
// content survives YAML) and runcmd, in a fixed field order.
package cloudinit

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	yaml "go.yaml.in/yaml/v2"
)

// Header is the first line of a cloud-config document.
const Header = "#cloud-config\n"

// WriteFile is one write_files entry.
type WriteFile struct {
	Path        string `yaml:"path"`
	Owner       string `yaml:"owner,omitempty"`
	Permissions string `yaml:"permissions,omitempty"`
	Encoding    string `yaml:"encoding"`
	Content     string `yaml:"content"`
}

// Config is the part of cloud-config capn writes.
type Config struct {
	WriteFiles []WriteFile `yaml:"write_files,omitempty"`
	// RunCmd entries are a string (a shell line) or a []string (words,
	// which cloud-init shell-quotes).
	RunCmd []any `yaml:"runcmd,omitempty"`
}

// Files converts files to write_files entries, content base64-encoded.
func Files(files []bootstrap.File) []WriteFile {
	out := make([]WriteFile, len(files))
	for i, f := range files {
		out[i] = WriteFile{
			Path:        f.Path,
			Owner:       f.Owner,
			Permissions: f.Permissions,
			Encoding:    "b64",
			Content:     base64.StdEncoding.EncodeToString(f.Content),
		}
	}
	return out
}

// Marshal renders c as a cloud-config document.
func Marshal(c Config) ([]byte, error) {
	body, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("marshal cloud-config: %w", err)
	}
	return append([]byte(Header), body...), nil
}

// IsCloudConfig is true when data starts with the #cloud-config header.
func IsCloudConfig(data []byte) bool {
	return bytes.HasPrefix(data, []byte("#cloud-config")) &&
		(len(data) == len("#cloud-config") || data[len("#cloud-config")] == '\n' || data[len("#cloud-config")] == '\r')
}

// AppendWriteFiles adds files to the write_files of a user's cloud-config
// document and returns the document re-serialised (keys in the user's
// order; comments are not kept). It fails when the document is not a
// mapping, when its write_files is not a list, or when the user already
// writes one of the paths.
func AppendWriteFiles(doc []byte, files []WriteFile) ([]byte, error) {
	if !IsCloudConfig(doc) {
		return nil, errors.New("not a #cloud-config document")
	}
	var m yaml.MapSlice
	if err := yaml.Unmarshal(doc, &m); err != nil {
		return nil, fmt.Errorf("parse cloud-config: %w", err)
	}
	entries := make([]any, len(files))
	for i, f := range files {
		entries[i] = f
	}
	found := false
	for i, item := range m {
		if item.Key != "write_files" {
			continue
		}
		found = true
		list, ok := item.Value.([]any)
		if !ok && item.Value != nil {
			return nil, fmt.Errorf("cloud-config write_files: a %T, want a list", item.Value)
		}
		taken := map[string]bool{}
		for _, e := range list {
			if em, ok := e.(yaml.MapSlice); ok {
				for _, kv := range em {
					if kv.Key == "path" {
						taken[fmt.Sprint(kv.Value)] = true
					}
				}
			}
		}
		for _, f := range files {
			if taken[f.Path] {
				return nil, fmt.Errorf("cloud-config write_files: %s is written by capn", f.Path)
			}
		}
		m[i].Value = append(list, entries...)
	}
	if !found {
		m = append(m, yaml.MapItem{Key: "write_files", Value: entries})
	}
	body, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshal cloud-config: %w", err)
	}
	return append([]byte(Header), body...), nil
}
