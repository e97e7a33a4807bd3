package docker_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/docker"
	"github.com/capn-dev/capn/providers/docker/dockertest"
	"github.com/capn-dev/capn/providers/docker/engine"
	"github.com/capn-dev/capn/providers/sdk"
	"github.com/capn-dev/capn/providers/sdk/sdktest"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/daemon"
)

// A daemon that accepts connections and never answers must not hang a
// call: every call has a deadline.
func TestCallsToAStuckDaemonTimeOut(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	api, err := engine.New("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	api.Timeout = 200 * time.Millisecond
	start := time.Now()
	err = api.Ping(context.Background())
	if !errors.Is(err, engine.ErrUnreachable) || time.Since(start) > 2*time.Second {
		t.Fatalf("Ping = %v after %s; want ErrUnreachable within the timeout", err, time.Since(start))
	}
	start = time.Now()
	err = api.Events(context.Background(), nil, nil, func(engine.Event) {})
	if err == nil || time.Since(start) > 2*time.Second {
		t.Fatalf("Events = %v after %s; want an error within the timeout", err, time.Since(start))
	}
}

func TestPreflightSaysWhatIsMissing(t *testing.T) {
	err := docker.Preflight(context.Background(), docker.Options{Host: "unix://" + filepath.Join(t.TempDir(), "none.sock")})
	if err == nil || !strings.Contains(err.Error(), "cannot reach the Docker daemon") {
		t.Errorf("no daemon: %v", err)
	}
	dockertest.Client(t)
	err = docker.Preflight(context.Background(), docker.Options{Image: "capn-node:does-not-exist"})
	if err == nil || !strings.Contains(err.Error(), "make images") || !strings.Contains(err.Error(), "capn-node:does-not-exist") {
		t.Errorf("no image: %v", err)
	}
	// The service refuses to start, at once, with that error.
	env := sdktest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	svc := docker.NewService(docker.Options{Image: "capn-node:does-not-exist", StateDir: t.TempDir()}, sdk.Options{})
	err = daemon.Run(ctx, daemon.Config{NATS: daemon.NATSConfig{URL: env.Server.URL()}, SkipProvision: true}, svc,
		daemon.WithoutHTTP(), daemon.WithLogger(sdktest.Logger(t)))
	if err == nil || !strings.Contains(err.Error(), "make images") || ctx.Err() != nil {
		t.Errorf("service: %v", err)
	}
}

// docker stop behind capn's back is drift Stopped; capn's start brings
// the machine back on the same address.
func TestStoppedOutOfBandIsDrift(t *testing.T) {
	t.Parallel()
	api := dockertest.Client(t)
	image := dockertest.Image(t)
	env := sdktest.New(t)
	env.AnswerCredentials(docker.Name, "test-credential")
	env.WaitTimeout = time.Minute // containers start slowly on a loaded machine
	deployment := "t" + strings.ToLower(strings.ReplaceAll(t.Name(), "Test", ""))[:12]
	opts := options(t, image, deployment, t.TempDir())
	opts.StopTimeout = time.Second
	env.Run(docker.NewService(opts, sdk.Options{ReconcileEvery: 300 * time.Millisecond}))
	env.Send(docker.Name, sdk.KindMachine, "create", "create-m1", &capnv1.CreateMachine{
		Cluster: "c1", Machine: "m1", Version: "v1.33.4", BootstrapChecksum: "sha256:00"})
	before := env.WaitState(docker.Name, "c1", "m1", sdk.StateRunning)
	if err := api.ContainerStop(context.Background(), deployment+".c1.m1", time.Second); err != nil {
		t.Fatal(err)
	}
	env.WaitDrift("c1", "m1", sdk.DriftStopped)
	env.WaitState(docker.Name, "c1", "m1", sdk.StateStopped)
	env.Send(docker.Name, sdk.KindMachine, "start", "start-m1", &capnv1.MachinePower{Cluster: "c1", Machine: "m1", Action: "start"})
	after := env.WaitState(docker.Name, "c1", "m1", sdk.StateRunning)
	if after.GetProviderId() != before.GetProviderId() || after.GetAddresses()[0].GetAddress() != before.GetAddresses()[0].GetAddress() {
		t.Errorf("identity changed: %v then %v", before, after)
	}
	ctr, err := api.ContainerInspect(context.Background(), deployment+".c1.m1")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ctr.NetworkSettings.Networks {
		if n.IPAddress != before.GetAddresses()[0].GetAddress() {
			t.Errorf("the container runs on %s, its record says %s", n.IPAddress, before.GetAddresses()[0].GetAddress())
		}
	}
}
