package realnode

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// LockHost is exclusive across processes: while it is held (twice: the
// second is counted, not a deadlock), a flock of the same file from
// another open file description, as another process's would be, is
// refused; once both holders released, it is granted.
func TestLockHostExcludesOthers(t *testing.T) {
	name := "locktest-" + strconv.Itoa(os.Getpid())
	path := filepath.Join(os.TempDir(), "capn-"+name+".lock")
	t.Cleanup(func() { os.Remove(path) })
	r1, err := LockHost(name, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := LockHost(name, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	other, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	try := func() error { return syscall.Flock(int(other.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) }
	if try() == nil {
		t.Fatal("another flock of the lock was granted while LockHost holds it")
	}
	r1()
	r1() // a second call of one release changes nothing
	if try() == nil {
		t.Fatal("another flock was granted while the second holder still holds it")
	}
	r2()
	if err := try(); err != nil {
		t.Fatalf("the lock is still held after both holders released: %v", err)
	}
}
