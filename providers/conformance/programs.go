package conformance

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Module is capn's module path: programs are built by package path, so
// Build works inside capn and in a provider's own module that requires it.
const Module = "github.com/capn-dev/capn"

// CoreProgramNames are capn's core services a provider is tested against (the
// health-watcher turns node heartbeats into the records that make a machine Running).
var CoreProgramNames = []string{"cluster-planner", "machine-manager", "bootstrapper", "health-watcher"}

// BinDirEnv names a directory of prebuilt programs (a capn release) that
// CorePrograms and Build use instead of building.
const BinDirEnv = "CAPN_CONFORMANCE_BIN_DIR"

// Build builds static (CGO_ENABLED=0) binaries of capn's programs (the
// names under cmd/, e.g. "capn-node") into dir with go build. It is what a
// TestMain calls; builds are cached by the go tool.
func Build(dir string, programs ...string) error {
	args := []string{"build", "-trimpath", "-o", dir + string(filepath.Separator)}
	for _, p := range programs {
		args = append(args, Module+"/cmd/"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", strings.Join(programs, " "), err, out.String())
	}
	return nil
}

var (
	coreOnce sync.Once
	coreDir  string
	coreErr  error

	tempMu   sync.Mutex
	tempDirs []string
)

// BuildTemp builds programs (see Build) into a new temporary directory,
// which Main removes at the end of the test binary.
func BuildTemp(programs ...string) (string, error) {
	dir, err := os.MkdirTemp("", "capn-conformance-")
	if err != nil {
		return "", err
	}
	tempMu.Lock()
	tempDirs = append(tempDirs, dir)
	tempMu.Unlock()
	return dir, Build(dir, programs...)
}

// Main runs a provider package's tests (call it from TestMain) and then
// removes the programs BuildTemp and CorePrograms built.
func Main(m *testing.M) {
	code := m.Run()
	CleanupBuilds()
	os.Exit(code)
}

// CleanupBuilds removes what BuildTemp built (Main calls it).
func CleanupBuilds() {
	tempMu.Lock()
	defer tempMu.Unlock()
	for _, d := range tempDirs {
		_ = os.RemoveAll(d)
	}
	tempDirs = nil
}

// CorePrograms returns a Features.Capn that runs capn's core programs
// (cluster-planner, machine-manager, bootstrapper) as separate processes
// against the test's server — a capn release, as a deployment runs it.
// They come from $CAPN_CONFORMANCE_BIN_DIR, or are built once per test
// binary (call Main from TestMain to remove them). Each is stopped (SIGTERM, then SIGKILL) when the test ends;
// its output is logged when the test fails.
func CorePrograms() func(t *testing.T, natsURL string) {
	return CoreProgramsWithKey(nil)
}

// CoreProgramsWithKey is CorePrograms with the secrets bucket sealed by key
// (32 bytes; nil: a new random one), for a test that seals values of its
// own there (a bootstrap secret).
func CoreProgramsWithKey(key []byte) func(t *testing.T, natsURL string) {
	return func(t *testing.T, natsURL string) {
		t.Helper()
		dir := os.Getenv(BinDirEnv)
		if dir == "" {
			coreOnce.Do(func() { coreDir, coreErr = BuildTemp(CoreProgramNames...) })
			if coreErr != nil {
				t.Fatal(coreErr)
			}
			dir = coreDir
		}
		if key == nil {
			key = make([]byte, 32)
			_, _ = rand.Read(key)
		}
		for _, name := range CoreProgramNames {
			env := []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json"}
			if name == "bootstrapper" || name == "health-watcher" { // the health-watcher opens kubeconfigs to read Nodes
				env = append(env, "CAPN_SECRETS_KEY="+hex.EncodeToString(key))
			}
			StartProgram(t, filepath.Join(dir, name), env, "--nats-url="+natsURL, "--http-addr=off")
		}
	}
}

// StartProgram runs a program until the test ends: SIGTERM then, after
// 10s, SIGKILL; it dies with the test binary too (Pdeathsig). Its output
// goes to a file that is logged when the test fails.
func StartProgram(t *testing.T, path string, env []string, args ...string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(path)+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", path, err)
	}
	logf.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("%s did not stop within 10s of SIGTERM", filepath.Base(path))
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("%s output (last 8 KiB):\n%s", filepath.Base(path), tail(b, 8<<10))
			}
		}
	})
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
