// Package dockertest gives tests a Docker daemon and the capn-node image:
// a test that needs Docker calls Client (it skips with a message when no
// daemon answers, unless CAPN_REQUIRE_DOCKER=1 — CI sets it — which turns
// the skip into a failure) and Image (the image built once per test
// binary from deploy/images/capn-node.Dockerfile, FROM scratch; removed
// by Main).
package dockertest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/docker/engine"
)

// RequireEnv set to 1 makes a missing daemon fail the tests that need it.
const RequireEnv = "CAPN_REQUIRE_DOCKER"

// Dockerfile is the image's Dockerfile, relative to the module root.
const Dockerfile = "deploy/images/capn-node.Dockerfile"

// Busybox is the static busybox the image's shell comes from (Debian's
// busybox-static), as hack/images.sh takes it.
const Busybox = "/bin/busybox"

var (
	imageOnce sync.Once
	image     string
	imageErr  error
)

// Client returns a client of the daemon at $DOCKER_HOST (or the default
// socket), or skips the test — fails it under CAPN_REQUIRE_DOCKER=1 —
// when the daemon does not answer within 5s.
func Client(t testing.TB) *engine.Client {
	t.Helper()
	api, err := Available()
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s=1 but Docker is not usable: %v", RequireEnv, err)
		}
		t.Skipf("skipped: Docker is not usable (%v); set %s=1 to make this a failure", err, RequireEnv)
	}
	t.Cleanup(api.Close)
	return api
}

// Available returns a client if the daemon answers within 5s.
func Available() (*engine.Client, error) {
	api, err := engine.New(os.Getenv("DOCKER_HOST"))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := api.Ping(ctx); err != nil {
		return nil, err
	}
	return api, nil
}

// Image builds (once per test binary) capn-node and its image, tagged
// capn-node:test-<random>, and returns the tag.
func Image(t testing.TB) string {
	t.Helper()
	api := Client(t)
	imageOnce.Do(func() { image, imageErr = build(api) })
	if imageErr != nil {
		t.Fatal(imageErr)
	}
	return image
}

// Main runs the tests (call it from TestMain), then removes the image and
// the programs built for them.
func Main(m *testing.M) {
	code := m.Run()
	if image != "" {
		if api, err := Available(); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = api.ImageRemove(ctx, image, true)
			cancel()
		}
	}
	conformance.CleanupBuilds()
	os.Exit(code)
}

func build(api *engine.Client) (string, error) {
	dir, err := conformance.BuildTemp("capn-node")
	if err != nil {
		return "", err
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, Dockerfile))
	if err != nil {
		return "", err
	}
	bin, err := os.ReadFile(filepath.Join(dir, "capn-node"))
	if err != nil {
		return "", err
	}
	shell, err := os.ReadFile(Busybox)
	if err != nil {
		return "", fmt.Errorf("the capn-node image needs a static busybox for its shell: install Debian's busybox-static (%w)", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
		mode int64
	}{{"Dockerfile", dockerfile, 0o644}, {"capn-node", bin, 0o755}, {"busybox", shell, 0o755}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: time.Now()}); err != nil {
			return "", err
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	tag := "capn-node:test-" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := api.ImageBuild(ctx, tag, "Dockerfile", &buf); err != nil {
		return "", fmt.Errorf("%w\n%s", err, out)
	}
	return tag, nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", conformance.Module).Output()
	if err != nil {
		return "", fmt.Errorf("find the capn module: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
