package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capn-dev/capn/providers/docker"
	"github.com/capn-dev/capn/providers/docker/dockertest"
	"github.com/capn-dev/capn/providers/docker/engine"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// A provider in a container (docker-compose) joins a cluster's network to
// check its endpoint, at the subnet's last address so that machines keep
// theirs, and leaves it before the delete removes it; its machines get
// the node user's NATS files copied in and its inbox prefix. The "provider
// container" here is a plain container standing in for it.
func TestProviderInAContainerJoinsAndLeavesClusterNetworks(t *testing.T) {
	t.Parallel()
	api := dockertest.Client(t)
	image := dockertest.Image(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	deployment := "tselfcontainer"
	opts := options(t, image, deployment, t.TempDir())

	self := deployment + "-provider"
	stop := 1
	if _, err := api.ContainerCreate(ctx, self, &engine.ContainerConfig{
		Image: image, Cmd: []string{"endpoint", "--cluster=none", "--listen=:6443"}, Env: []string{}, StopTimeout: &stop,
		Labels:     map[string]string{docker.LabelProvider: docker.Name, docker.LabelDeployment: deployment},
		HostConfig: engine.HostConfig{RestartPolicy: engine.RestartPolicy{Name: "no"}},
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.ContainerRemove(context.Background(), self, true) })
	if err := api.ContainerStart(ctx, self); err != nil {
		t.Fatal(err)
	}

	files := t.TempDir()
	want := map[string]string{}
	for flag, content := range map[string]string{"nkey": "SUAEXAMPLESEED\n", "ca": "ca pem\n", "cert": "cert pem\n", "key": "key pem\n"} {
		p := filepath.Join(files, flag)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		want[flag] = p
	}
	opts.SelfContainer = self
	opts.NodeNATSNKey, opts.NodeNATSTLSCA, opts.NodeNATSTLSCert, opts.NodeNATSTLSKey = want["nkey"], want["ca"], want["cert"], want["key"]
	opts.NodeNATSInboxPrefix = "_INBOX_custom"
	p, err := docker.New(opts, "nats://127.0.0.1:1") // nothing listens: the node just retries
	if err != nil {
		t.Fatal(err)
	}

	ic, err := p.EnsureCluster(ctx, "c1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !ic.GetReady() || ic.GetControlPlaneEndpoint().GetHost() != "127.0.0.1" || ic.GetControlPlaneEndpoint().GetPort() == 0 {
		t.Errorf("infra %v: want ready on 127.0.0.1:<port>", ic)
	}
	ctr, err := api.ContainerInspect(ctx, self)
	if err != nil {
		t.Fatal(err)
	}
	att, ok := ctr.NetworkSettings.Networks[deployment+".c1"]
	if !ok {
		t.Fatalf("the provider's container did not join the cluster network: %v", ctr.NetworkSettings.Networks)
	}
	if !strings.HasSuffix(att.IPAddress, ".254") {
		t.Errorf("the provider's container is on %s, want the subnet's .254", att.IPAddress)
	}

	im, err := p.CreateMachine(ctx, &capnv1.CreateMachine{Cluster: "c1", Machine: "m1", Version: "v1.33.4", BootstrapChecksum: "sha256:00"})
	if err != nil {
		t.Fatal(err)
	}
	if a := im.GetAddresses()[0].GetAddress(); strings.HasSuffix(a, ".254") || a == att.IPAddress {
		t.Errorf("machine on %s, the provider's address", a)
	}
	m, err := api.ContainerInspect(ctx, deployment+".c1.m1")
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"--nats-nkey=" + docker.NKeyMount, "--nats-tls-ca=" + docker.TLSCAMount, "--nats-tls-cert=" + docker.TLSCertMount,
		"--nats-tls-key=" + docker.TLSKeyMount, "--nats-inbox-prefix=_INBOX_custom"} {
		if !slices.Contains(m.Config.Cmd, arg) {
			t.Errorf("capn-node runs without %s: %v", arg, m.Config.Cmd)
		}
	}
	for flag, path := range map[string]string{"nkey": docker.NKeyMount, "ca": docker.TLSCAMount, "cert": docker.TLSCertMount, "key": docker.TLSKeyMount} {
		got, err := api.ReadFile(ctx, deployment+".c1.m1", path)
		src, _ := os.ReadFile(want[flag])
		if err != nil || string(got) != string(src) {
			t.Errorf("%s in the machine = %q, %v; want the provider's %s", path, got, err, want[flag])
		}
	}
	for _, b := range m.HostConfig.Binds {
		if strings.HasPrefix(b, files) {
			t.Errorf("a provider-local file is bind-mounted (a path on the daemon's host): %s", b)
		}
	}

	if err := p.DeleteMachine(ctx, "c1", "m1"); err != nil {
		t.Fatal(err)
	}
	if err := p.DeleteCluster(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, api, deployment, "c1"); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if ctr, err = api.ContainerInspect(ctx, self); err != nil || !ctr.State.Running {
		t.Fatalf("the provider's container: %v", err)
	}
	if _, ok := ctr.NetworkSettings.Networks[deployment+".c1"]; ok {
		t.Error("the provider's container is still on the cluster network")
	}
}
