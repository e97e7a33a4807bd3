package bootstrap_test

import (
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMerge(t *testing.T) {
	ca := &capnv1.CertificateAuthority{CertificatePem: "c"}
	base := &capnv1.BootstrapSpec{
		Provider: "script", UserData: "#!/bin/sh\n", Ca: ca,
		Files:       []*capnv1.File{{Path: "/a", Content: "base a"}, {Path: "/b", Content: "base b"}},
		PreCommands: []string{"p1"}, PostCommands: []string{"q1"},
		KubeletExtraArgs:      map[string]string{"x": "1", "y": "1"},
		TokenTtl:              durationpb.New(time.Hour),
		IgnorePreflightErrors: []string{"ImagePull"},
	}
	baseCopy := proto.Clone(base)
	tests := []struct {
		name     string
		override *capnv1.BootstrapSpec
		want     *capnv1.BootstrapSpec
	}{
		{"nil override", nil, base},
		{"same provider keeps user data", &capnv1.BootstrapSpec{
			Files:       []*capnv1.File{{Path: "/c", Content: "c"}, {Path: "/a", Content: "pool a"}},
			PreCommands: []string{"p2"}, KubeletExtraArgs: map[string]string{"y": "2", "z": "2"},
			IgnorePreflightErrors: []string{"Swap", "imagepull"},
		}, &capnv1.BootstrapSpec{
			Provider: "script", UserData: "#!/bin/sh\n", Ca: ca,
			Files:       []*capnv1.File{{Path: "/a", Content: "pool a"}, {Path: "/b", Content: "base b"}, {Path: "/c", Content: "c"}},
			PreCommands: []string{"p1", "p2"}, PostCommands: []string{"q1"},
			KubeletExtraArgs:      map[string]string{"x": "1", "y": "2", "z": "2"},
			TokenTtl:              durationpb.New(time.Hour),
			IgnorePreflightErrors: []string{"ImagePull", "Swap"},
		}},
		{"other provider drops user data", &capnv1.BootstrapSpec{Provider: "kubeadm", TokenTtl: durationpb.New(time.Minute)}, &capnv1.BootstrapSpec{
			Provider: "kubeadm", Ca: ca, Files: base.Files, PreCommands: base.PreCommands, PostCommands: base.PostCommands,
			KubeletExtraArgs: base.KubeletExtraArgs, TokenTtl: durationpb.New(time.Minute), IgnorePreflightErrors: base.IgnorePreflightErrors,
		}},
		{"format and command timeout replace", &capnv1.BootstrapSpec{Provider: "kubeadm", Format: "ignition", CommandTimeout: durationpb.New(time.Minute)}, &capnv1.BootstrapSpec{
			Provider: "kubeadm", Ca: ca, Files: base.Files, PreCommands: base.PreCommands, PostCommands: base.PostCommands,
			KubeletExtraArgs: base.KubeletExtraArgs, TokenTtl: durationpb.New(time.Hour), Format: "ignition", CommandTimeout: durationpb.New(time.Minute),
			IgnorePreflightErrors: base.IgnorePreflightErrors,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := bootstrap.Merge(base, tt.override)
			if !proto.Equal(got, tt.want) {
				t.Fatalf("Merge =\n%v\nwant\n%v", got, tt.want)
			}
			if !proto.Equal(base, baseCopy) {
				t.Fatal("Merge changed its base")
			}
		})
	}
	if got := bootstrap.Merge(nil, nil); got == nil {
		t.Fatal("Merge(nil, nil) = nil")
	}
}
