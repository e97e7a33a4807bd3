package testkit

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Proc is one process of /proc.
type Proc struct {
	PID, PPID, PGID int
	State           string
	Cmdline         string
	Exe             string
}

// Processes lists the live (not zombie) processes (Linux: /proc).
func Processes(t testing.TB) []Proc {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []Proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		p := Proc{PID: pid, State: f[0]}
		p.PPID, _ = strconv.Atoi(f[1])
		p.PGID, _ = strconv.Atoi(f[2])
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		p.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
		p.Exe, _ = os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		out = append(out, p)
	}
	return out
}

// Alive is true while the process pid lives (and is no zombie).
func Alive(t testing.TB, pid int) bool {
	for _, p := range Processes(t) {
		if p.PID == pid {
			return true
		}
	}
	return false
}

// RequireLinux skips a test that reads /proc or relies on Pdeathsig
// elsewhere.
func RequireLinux(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc and relies on Pdeathsig: Linux only")
	}
}
