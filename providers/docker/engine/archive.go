package engine

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"time"
)

// WriteFile writes one file into a container's filesystem (running or
// not), creating its parent directories.
func (c *Client) WriteFile(ctx context.Context, id, file string, data []byte, mode fs.FileMode) error {
	if !path.IsAbs(file) {
		return fmt.Errorf("docker: %q is not an absolute path", file)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	// Every parent directory, then the file, relative to /.
	var dirs []string
	for d := path.Dir(file); d != "/"; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	now := time.Now()
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755, ModTime: now}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: file[1:], Mode: int64(mode.Perm()), Size: int64(len(data)), ModTime: now}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	q := url.Values{"path": {"/"}}
	resp, err := c.send(ctx, http.MethodPut, "/containers/"+url.PathEscape(id)+"/archive", q, &buf, "application/x-tar")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// ReadFile reads one file from a container's filesystem (ErrNotFound when
// it does not exist).
func (c *Client) ReadFile(ctx context.Context, id, file string) ([]byte, error) {
	q := url.Values{"path": {file}}
	resp, err := c.send(ctx, http.MethodGet, "/containers/"+url.PathEscape(id)+"/archive", q, nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	tr := tar.NewReader(resp.Body)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("docker: %s: no file in the archive: %w", file, ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg {
			return io.ReadAll(tr)
		}
	}
}
