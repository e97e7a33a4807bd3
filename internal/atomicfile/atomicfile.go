// Package atomicfile writes a file so that a reader sees the old content
// or the new, never part of it: a temporary file beside it gets the data
// and the mode, then is renamed over the path.
package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
)

// Write writes data to dst with mode, creating dst's directory (and its
// parents) with dirMode when missing. A failed write leaves dst as it
// was and no temporary file behind.
func Write(dst string, data []byte, mode, dirMode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), dirMode); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-"+filepath.Base(dst))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
