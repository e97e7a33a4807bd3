package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/capn-dev/capn/internal/atomicfile"
)

func TestWrite(t *testing.T) {
	root := t.TempDir()
	dst := filepath.Join(root, "a", "b", "key.pem")
	if err := atomicfile.Write(dst, []byte("one"), 0o600, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(dst, []byte("two"), 0o640, 0o700); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dst)
	if err != nil || string(b) != "two" {
		t.Fatalf("content %q (%v), want two", b, err)
	}
	fi, _ := os.Stat(dst)
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	di, _ := os.Stat(filepath.Join(root, "a", "b"))
	if di.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, want 0700", di.Mode().Perm())
	}
	left, _ := os.ReadDir(filepath.Dir(dst))
	if len(left) != 1 {
		t.Errorf("files beside it: %v, want key.pem alone", left)
	}
	// A directory in the way: the write fails, the temporary file goes.
	if err := os.Mkdir(filepath.Join(root, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "dir", "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(filepath.Join(root, "dir"), []byte("x"), 0o600, 0o700); err == nil {
		t.Error("a write over a non-empty directory succeeded")
	}
	if left, _ := os.ReadDir(root); len(left) != 2 {
		t.Errorf("root holds %v, want a and dir only", left)
	}
}
