package builtin_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/builtin"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current renders")

// TestGolden pins the bytes every built-in provider renders for fixed
// inputs (a PKI kept in testdata, a fixed token): a change meant to make
// rendering cheaper must leave them as they are. Regenerate with
// go test ./services/bootstrapper/bootstrap/builtin -run TestGolden -update
// only for a change meant to change what machines get.
func TestGolden(t *testing.T) {
	set := goldenPKI(t)
	full := bootstraptest.FullSpec("")
	full.IgnorePreflightErrors = []string{"ImagePull"}
	ignition := bootstraptest.FullSpec("kubeadm")
	ignition.Format = "ignition"
	ignition.CommandTimeout = durationpb.New(90 * time.Second)
	script := &capnv1.BootstrapSpec{Provider: "script", UserData: "#!/bin/sh\nkubeadm join \"$CAPN_API_ENDPOINT\" --token \"$CAPN_JOIN_TOKEN\"\n", Files: full.Files}
	local := &capnv1.BootstrapSpec{Provider: "kube-local", Files: full.Files, PreCommands: []string{"echo 'pre'"}}
	machines := []struct {
		name, role string
		first      bool
		os         string
	}{
		{"init", "control-plane", true, ""}, {"control-plane-join", "control-plane", false, ""}, {"worker", "worker", false, ""},
	}
	specs := []struct {
		name    string
		spec    *capnv1.BootstrapSpec
		windows bool
	}{
		{"kubeadm-empty", &capnv1.BootstrapSpec{}, false},
		{"kubeadm-full", full, false},
		{"kubeadm-ignition", ignition, false},
		{"kubeadm-windows", bootstraptest.WindowsSpec("kubeadm"), true},
		{"script", script, false},
		{"kube-local", local, false},
	}
	for _, sp := range specs {
		for _, m := range machines {
			os_ := m.os
			if sp.windows {
				if m.role != "worker" {
					continue
				}
				os_ = "windows"
			}
			name := sp.name + "-" + m.name
			t.Run(name, func(t *testing.T) {
				cmd := &capnv1.GenerateBootstrap{Cluster: "prod-1", Machine: "prod-1-" + m.name + "-abcde", Role: m.role, FirstControlPlane: m.first,
					Os: os_, Version: "v1.34.2", Bootstrap: sp.spec, Labels: bootstraptest.Labels, Taints: bootstraptest.Taints}
				in, err := bootstrap.NewInput(cmd, bootstrap.Cluster{Endpoint: bootstrap.Endpoint{Host: "api.prod-1.example.com", Port: 6443},
					Network: &capnv1.NetworkSpec{PodCidrs: []string{"10.244.0.0/16"}, ServiceCidrs: []string{"10.96.0.0/12"}, ServiceDomain: "cluster.local"},
					PKI:     set}, token.Token{ID: "abcdef", Secret: "0123456789abcdef"})
				if err != nil {
					t.Fatal(err)
				}
				out, err := builtin.Registry().Render(in)
				if err != nil {
					t.Fatal(err)
				}
				path := filepath.Join("testdata", "golden", name+"."+string(out.Format))
				if *update {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, out.Data, 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (write it with -update)", err)
				}
				if !bytes.Equal(out.Data, want) {
					t.Fatalf("rendered %d bytes that differ from %s (%d bytes)", len(out.Data), path, len(want))
				}
			})
		}
	}
}

// goldenPKI is the cluster PKI kept in testdata (made once, with -update
// when missing: the CAs last ten years).
func goldenPKI(t *testing.T) pki.Set {
	t.Helper()
	path := filepath.Join("testdata", "pki.json")
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) && *update {
		set, _, err := pki.Ensure(pki.Set{}, pki.Options{Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		opts := protojson.MarshalOptions{Multiline: true}
		if b, err = opts.Marshal(pki.ToProto(set)); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	var p capnv1.ClusterPKI
	if err := protojson.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	return pki.FromProto(&p)
}
