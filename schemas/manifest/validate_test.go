package manifest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// valid returns a defaulted, valid cluster for tests to break.
func valid() *capnv1.Cluster {
	c := &capnv1.Cluster{
		ApiVersion: APIVersion,
		Kind:       KindCluster,
		Metadata:   &capnv1.ObjectMeta{Name: "demo"},
		Spec: &capnv1.ClusterSpec{
			KubernetesVersion: "v1.34.2",
			ControlPlane:      &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 3},
			WorkerPools: []*capnv1.WorkerPool{
				{Name: "md-0", Provider: "sim", Replicas: 3, Labels: map[string]string{"tier": "web"}},
				{Name: "gpu", Provider: "sim", Replicas: 0, Version: "v1.33.1"},
			},
		},
	}
	Default(c)
	return c
}

func TestValidateValid(t *testing.T) {
	if err := Validate(valid()); err != nil {
		t.Fatal(err)
	}
}

// TestValidateNonMachineControlPlane: a hosted or external control plane
// without the machine-only fields is valid, its default leaves maxSurge
// empty, and its replicas do not count as machines.
func TestValidateNonMachineControlPlane(t *testing.T) {
	for _, typ := range []string{capnv1.ControlPlaneHosted, capnv1.ControlPlaneExternal} {
		c := &capnv1.Cluster{ApiVersion: APIVersion, Kind: KindCluster, Metadata: &capnv1.ObjectMeta{Name: "demo"},
			Spec: &capnv1.ClusterSpec{KubernetesVersion: "v1.34.2",
				ControlPlane: &capnv1.ControlPlaneSpec{Type: typ, Replicas: 1},
				WorkerPools:  []*capnv1.WorkerPool{{Name: "md-0", Provider: "sim", Replicas: 3}}}}
		if typ == capnv1.ControlPlaneHosted {
			c.Spec.ControlPlane.Replicas = 3 // a hosted control plane runs 1 or 3
		} else {
			c.Spec.ControlPlane.External = &capnv1.ExternalControlPlaneSpec{Kubeconfig: "prod"}
			c.Spec.ControlPlane.Replicas = 0 // defaulted to 1
		}
		Default(c)
		if c.Spec.ControlPlane.MaxSurge != nil {
			t.Errorf("%s: Default set maxSurge %d", typ, *c.Spec.ControlPlane.MaxSurge)
		}
		if err := (Validator{MaxClusterReplicas: 3}).Validate(c); err != nil {
			t.Errorf("%s: %v", typ, err)
		}
	}
}

func TestValidate(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	tests := []struct {
		name   string
		modify func(c *capnv1.Cluster)
		want   []string // each must be one of the reported errors' text (prefix match)
	}{
		{"apiVersion and kind", func(c *capnv1.Cluster) { c.ApiVersion, c.Kind = "v1", "" },
			[]string{`apiVersion: "v1": must be capn.dev/v1alpha1`, `kind: "": must be Cluster`}},
		{"name", func(c *capnv1.Cluster) { c.Metadata.Name = "Demo_1" },
			[]string{`metadata.name: "Demo_1": must be a DNS-1123 label`}},
		{"name too long", func(c *capnv1.Cluster) { c.Metadata.Name = strings.Repeat("a", 64) },
			[]string{`metadata.name: "aaaa`}},
		{"missing name", func(c *capnv1.Cluster) { c.Metadata = nil }, []string{"metadata.name: required"}},
		{"missing spec", func(c *capnv1.Cluster) { c.Spec = nil }, []string{"spec: required"}},
		{"version", func(c *capnv1.Cluster) { c.Spec.KubernetesVersion = "1.34" },
			[]string{`spec.kubernetesVersion: "1.34": must be vMAJOR.MINOR.PATCH`}},
		{"even control plane", func(c *capnv1.Cluster) { c.Spec.ControlPlane.Replicas = 2 },
			[]string{"spec.controlPlane.replicas: 2: must be odd and between 1 and 7 (1, 3, 5 or 7)"}},
		{"control plane too big", func(c *capnv1.Cluster) { c.Spec.ControlPlane.Replicas = 9 },
			[]string{"spec.controlPlane.replicas: 9: must be odd"}},
		{"control plane surge 2", func(c *capnv1.Cluster) { c.Spec.ControlPlane.MaxSurge = i32(2) },
			[]string{"spec.controlPlane.maxSurge: 2: must be 0 or 1"}},
		{"control plane surge 0 at 1", func(c *capnv1.Cluster) {
			c.Spec.ControlPlane.Replicas, c.Spec.ControlPlane.MaxSurge = 1, i32(0)
		}, []string{"spec.controlPlane.maxSurge: 0: 0 needs 3 or more replicas (have 1)"}},
		{"missing control plane", func(c *capnv1.Cluster) { c.Spec.ControlPlane = nil },
			[]string{"spec.controlPlane: required"}},
		{"provider", func(c *capnv1.Cluster) { c.Spec.ControlPlane.Provider = "" },
			[]string{"spec.controlPlane.provider: required"}},
		{"pool names", func(c *capnv1.Cluster) {
			c.Spec.WorkerPools[1].Name = "md-0"
			c.Spec.WorkerPools = append(c.Spec.WorkerPools, &capnv1.WorkerPool{Name: "control-plane", Provider: "sim"})
		}, []string{
			`spec.workerPools[1].name: "md-0": duplicate: spec.workerPools[0] has the same name`,
			`spec.workerPools[2].name: "control-plane": reserved`,
		}},
		{"pool replicas and provider", func(c *capnv1.Cluster) {
			c.Spec.WorkerPools[0].Replicas, c.Spec.WorkerPools[0].Provider = -1, "Sim!"
		}, []string{"spec.workerPools[0].replicas: -1: must be 0 or more", `spec.workerPools[0].provider: "Sim!": must be a DNS-1123 label`}},
		{"pool newer than control plane", func(c *capnv1.Cluster) { c.Spec.WorkerPools[0].Version = "v1.34.3" },
			[]string{`spec.workerPools[0].version: "v1.34.3": newer than the control plane (v1.34.2)`}},
		{"pool too old", func(c *capnv1.Cluster) { c.Spec.WorkerPools[0].Version = "v1.30.9" },
			[]string{`spec.workerPools[0].version: "v1.30.9": 4 minor versions behind the control plane (v1.34.2): the Kubernetes skew policy allows at most 3`}},
		{"strategy", func(c *capnv1.Cluster) {
			s := c.Spec.WorkerPools[0].Strategy
			s.MaxSurge, s.MaxUnavailable = "101%", "-1"
			c.Spec.WorkerPools[1].Strategy.Type = "Recreate"
		}, []string{
			`spec.workerPools[0].strategy.maxSurge: "101%": a percentage must be from 0% to 100%`,
			`spec.workerPools[0].strategy.maxUnavailable: "-1": must be a non-negative count`,
			`spec.workerPools[1].strategy.type: "Recreate": must be RollingUpdate or OnDelete`,
		}},
		{"both zero", func(c *capnv1.Cluster) { c.Spec.WorkerPools[0].Strategy.MaxSurge = "0%" },
			[]string{"spec.workerPools[0].strategy: maxSurge and maxUnavailable are both 0"}},
		{"on delete with surge", func(c *capnv1.Cluster) { c.Spec.WorkerPools[0].Strategy.Type = StrategyOnDelete },
			[]string{
				`spec.workerPools[0].strategy.maxSurge: "1": must be empty with type OnDelete`,
				`spec.workerPools[0].strategy.maxUnavailable: "0": must be empty with type OnDelete`,
			}},
		{"deletion order", func(c *capnv1.Cluster) { c.Spec.WorkerPools[0].DeletionOrder = "Youngest" },
			[]string{`spec.workerPools[0].deletionOrder: "Youngest": must be Random, Newest or Oldest`}},
		{"labels and taints", func(c *capnv1.Cluster) {
			p := c.Spec.WorkerPools[0]
			p.Labels = map[string]string{"bad key!": "ok", "example.com/ok": strings.Repeat("v", 64)}
			p.Taints = []*capnv1.Taint{{Key: "a", Effect: "NoSchedule"}, {Key: "a", Effect: "NoSchedule"}, {Key: "b", Effect: "Never"}}
		}, []string{
			"spec.workerPools[0].labels[bad key!]: key must be a qualified name",
			`spec.workerPools[0].labels[example.com/ok]: "vvvv`,
			"spec.workerPools[0].taints[1]: duplicate of spec.workerPools[0].taints[0]",
			`spec.workerPools[0].taints[2].effect: "Never": must be NoSchedule, PreferNoSchedule or NoExecute`,
		}},
		{"network", func(c *capnv1.Cluster) {
			c.Spec.Network.PodCidrs = []string{"10.0.0.0/8", "10.1.0.0/16"}
			c.Spec.Network.ServiceCidrs = []string{"10.96.0.1/12"}
		}, []string{
			`spec.network.podCidrs[1]: "10.1.0.0/16": same IP family as spec.network.podCidrs[0]`,
			`spec.network.serviceCidrs[0]: "10.96.0.1/12": has host bits set: did you mean 10.96.0.0/12?`,
		}},
		{"overlap", func(c *capnv1.Cluster) { c.Spec.Network.ServiceCidrs = []string{"192.168.128.0/20"} },
			[]string{`spec.network.serviceCidrs[0]: "192.168.128.0/20": overlaps pod CIDR 192.168.0.0/16 (spec.network.podCidrs[0])`}},
		{"bootstrap", func(c *capnv1.Cluster) {
			c.Spec.Bootstrap.Provider = "ignition"
			c.Spec.Bootstrap.Files = []*capnv1.File{{Path: "etc/x", Permissions: "rw"}}
			c.Spec.Bootstrap.TokenTtl = durationpb.New(0)
			c.Spec.WorkerPools[0].Bootstrap = &capnv1.BootstrapSpec{Ca: &capnv1.CertificateAuthority{CertificatePem: "-----BEGIN CERTIFICATE-----"}}
		}, []string{
			`spec.bootstrap.provider: "ignition": unknown bootstrap provider: available are kube-local, kubeadm, script`,
			`spec.bootstrap.files[0].path: "etc/x": must be an absolute path`,
			`spec.bootstrap.files[0].permissions: "rw": must be an octal mode`,
			`spec.bootstrap.tokenTtl: 0s: must be positive`,
			`spec.workerPools[0].bootstrap.ca: needs both certificatePem and privateKeyPem`,
		}},
		{"bootstrap file secret refs", func(c *capnv1.Cluster) {
			c.Spec.Bootstrap.Files = []*capnv1.File{
				{Path: "/etc/ok", SecretRef: &capnv1.FileSecretRef{Name: "tls", Key: "tls.key"}},
				{Path: "/etc/both", Content: "x", SecretRef: &capnv1.FileSecretRef{Name: "tls", Key: "ca"}},
				{Path: "/etc/none", SecretRef: &capnv1.FileSecretRef{}},
				{Path: "/etc/bad", SecretRef: &capnv1.FileSecretRef{Name: "TLS!", Key: "a/b"}},
			}
		}, []string{
			"spec.bootstrap.files[1]: set one of content and secretRef, not both",
			"spec.bootstrap.files[2].secretRef.name: required: the bootstrap secret",
			"spec.bootstrap.files[2].secretRef.key: required: the key of the bootstrap secret",
			`spec.bootstrap.files[3].secretRef.name: "TLS!": must be a DNS-1123 label`,
			`spec.bootstrap.files[3].secretRef.key: "a/b": must be at most 253 letters`,
		}},
		{"bootstrap format and command timeout", func(c *capnv1.Cluster) {
			c.Spec.Bootstrap.Format = "yaml"
			c.Spec.Bootstrap.CommandTimeout = durationpb.New(0)
			c.Spec.WorkerPools[0].Bootstrap = &capnv1.BootstrapSpec{Provider: "script", Format: "ignition", CommandTimeout: durationpb.New(25 * time.Hour)}
		}, []string{
			`spec.bootstrap.format: "yaml": must be cloud-config, script or ignition`,
			"spec.bootstrap.commandTimeout: 0s: must be between 1s and 24h0m0s",
			"spec.workerPools[0].bootstrap.commandTimeout: 25h0m0s: must be between 1s and 24h0m0s",
			`spec.workerPools[0].bootstrap.format: "ignition": is rendered by the kubeadm bootstrap provider only (this level's is script)`,
		}},
		{"ignore preflight errors", func(c *capnv1.Cluster) {
			c.Spec.Bootstrap.IgnorePreflightErrors = []string{"ImagePull", "Port 6443", "IMAGEPULL"}
			c.Spec.WorkerPools[0].Bootstrap = &capnv1.BootstrapSpec{IgnorePreflightErrors: []string{"all", "Swap"}}
		}, []string{
			`spec.bootstrap.ignorePreflightErrors[1]: "Port 6443": must be a kubeadm preflight check's name`,
			`spec.bootstrap.ignorePreflightErrors[2]: "IMAGEPULL": duplicate of spec.bootstrap.ignorePreflightErrors[0]`,
			`spec.workerPools[0].bootstrap.ignorePreflightErrors: "all" ignores every check: give it alone`,
		}},
		{"operating systems", func(c *capnv1.Cluster) {
			c.Spec.ControlPlane.Os = "windows"
			c.Spec.WorkerPools[0].Os = "darwin"
			c.Spec.WorkerPools = append(c.Spec.WorkerPools,
				&capnv1.WorkerPool{Name: "win-script", Provider: "sim", Os: "windows", Bootstrap: &capnv1.BootstrapSpec{Provider: "script", Files: []*capnv1.File{{Path: "/etc/x"}}}},
				&capnv1.WorkerPool{Name: "win-ignition", Provider: "sim", Os: "windows", Bootstrap: &capnv1.BootstrapSpec{Format: "ignition", Files: []*capnv1.File{{Path: `C:\k\x`}}}},
			)
		}, []string{
			`spec.controlPlane.os: "windows": the control plane runs on linux only (as in Cluster API): put windows nodes in a worker pool`,
			`spec.workerPools[0].os: "darwin": must be linux or windows`,
			`spec.workerPools[2].bootstrap.files[0].path: "/etc/x": must be an absolute windows path such as C:\k\config.yaml`,
			`spec.workerPools[2].os: "windows": needs the kubeadm bootstrap provider (bootstrap.provider is script`,
			`spec.workerPools[3].os: "windows": windows machines take bootstrap.format cloud-config (cloudbase-init), not ignition`,
		}},
		{"windows pool inherits linux files", func(c *capnv1.Cluster) {
			c.Spec.Bootstrap.PostCommands = []string{"echo done"}
			c.Spec.WorkerPools[0].Os = "windows"
		}, []string{`spec.workerPools[0].os: "windows": the pool would inherit the files, preCommands and postCommands of spec.bootstrap`}},
		{"node timeouts", func(c *capnv1.Cluster) {
			c.Spec.ControlPlane.NodeDrainTimeout = durationpb.New(-time.Second)
			c.Spec.WorkerPools[0].NodeDeletionTimeout = durationpb.New(-2 * time.Second)
		}, []string{
			"spec.controlPlane.nodeDrainTimeout: -1s: must not be negative",
			"spec.workerPools[0].nodeDeletionTimeout: -2s: must not be negative",
		}},
		{"health", func(c *capnv1.Cluster) {
			c.Spec.Health = &capnv1.HealthPolicy{
				UnhealthyConditions: []*capnv1.UnhealthyCondition{{Type: "Ready", Status: "false"}},
				NodeStartupTimeout:  durationpb.New(10e9),
				MaxUnhealthy:        "[5-2]",
			}
		}, []string{
			`spec.health.unhealthyConditions[0].status: "false": must be True, False or Unknown`,
			"spec.health.nodeStartupTimeout: 10s: must be 0 (disabled) or at least 30s",
			`spec.health.maxUnhealthy: "[5-2]": a range [a-b] needs a <= b`,
		}},
		{"etcd snapshots", func(c *capnv1.Cluster) {
			c.Spec.EtcdSnapshots = &capnv1.EtcdSnapshotPolicy{Every: durationpb.New(30 * time.Second), Keep: 101}
		}, []string{
			"spec.etcdSnapshots: only for a control plane capn runs (spec.bootstrap.provider kube-local), not",
			"spec.etcdSnapshots.every: 30s: must be at least 1m0s",
			"spec.etcdSnapshots.keep: 101: must be from 1 to 100",
		}},
		{"control-plane type", func(c *capnv1.Cluster) { c.Spec.ControlPlane.Type = "kamaji" },
			[]string{`spec.controlPlane.type: "kamaji": must be one of machines, hosted, external (empty: machines)`}},
		{"hosted with machine fields", func(c *capnv1.Cluster) {
			cp := c.Spec.ControlPlane
			cp.Type, cp.Os = capnv1.ControlPlaneHosted, "linux"
			cp.Template = &capnv1.MachineTemplate{}
		}, []string{
			`spec.controlPlane.provider: "sim": must be empty for controlPlane.type hosted: it shapes control-plane machines`,
			`spec.controlPlane.template: must be empty for controlPlane.type hosted`,
			`spec.controlPlane.maxSurge: 1: must be empty for controlPlane.type hosted`,
			`spec.controlPlane.os: "linux": must be empty for controlPlane.type hosted`,
		}},
		{"external with a provider", func(c *capnv1.Cluster) {
			cp := c.Spec.ControlPlane
			cp.Type, cp.MaxSurge, cp.Replicas = capnv1.ControlPlaneExternal, nil, 0
			cp.External = &capnv1.ExternalControlPlaneSpec{Kubeconfig: "prod"}
		}, []string{
			`spec.controlPlane.provider: "sim": must be empty for controlPlane.type external`,
			`spec.controlPlane.replicas: 0: must be 1 or left out with type external`,
		}},
		{"external with replicas 3", func(c *capnv1.Cluster) {
			cp := c.Spec.ControlPlane
			cp.Type, cp.Provider, cp.MaxSurge, cp.Replicas = capnv1.ControlPlaneExternal, "", nil, 3
			cp.External = &capnv1.ExternalControlPlaneSpec{Kubeconfig: "prod"}
		}, []string{
			`spec.controlPlane.replicas: 3: must be 1 or left out with type external: the external cluster's owner runs its API servers`,
		}},
		{"hosted with replicas 0", func(c *capnv1.Cluster) {
			cp := c.Spec.ControlPlane
			cp.Type, cp.Provider, cp.MaxSurge, cp.Replicas = capnv1.ControlPlaneHosted, "", nil, 0
		}, []string{
			`spec.controlPlane.replicas: 0: a hosted control plane runs 1 or 3 replicas`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.modify(c)
			err := Validate(c)
			if err == nil {
				t.Fatal("valid, want errors")
			}
			got := flatten(err)
			for _, w := range tt.want {
				found := false
				for _, e := range got {
					var fe *FieldError
					if !errors.As(e, &fe) {
						t.Errorf("%v is not a *FieldError", e)
					}
					found = found || strings.HasPrefix(e.Error(), w)
				}
				if !found {
					t.Errorf("no error starts with %q; got:\n%v", w, err)
				}
			}
			if len(got) != len(tt.want) {
				t.Errorf("got %d errors, want %d:\n%v", len(got), len(tt.want), err)
			}
		})
	}
}

// TestBadVersionIsOneError: a bad spec.kubernetesVersion is one error on
// that field, not one more per pool that took it (from Default, as on an
// apply, or from an upgrade of the pools that followed the control plane).
func TestBadVersionIsOneError(t *testing.T) {
	c := &capnv1.Cluster{
		ApiVersion: APIVersion, Kind: KindCluster, Metadata: &capnv1.ObjectMeta{Name: "demo"},
		Spec: &capnv1.ClusterSpec{
			KubernetesVersion: "bogus",
			ControlPlane:      &capnv1.ControlPlaneSpec{Provider: "sim", Replicas: 1},
			WorkerPools: []*capnv1.WorkerPool{
				{Name: "md-0", Provider: "sim", Replicas: 1},
				{Name: "md-1", Provider: "sim", Replicas: 1},
			},
		},
	}
	Default(c)
	want := `spec.kubernetesVersion: "bogus": must be vMAJOR.MINOR.PATCH, e.g. v1.34.2`
	if got := flatten(Validate(c)); len(got) != 1 || got[0].Error() != want {
		t.Errorf("apply: %q, want the one error %q", got, want)
	}
	old := valid()
	next := valid()
	next.Spec.KubernetesVersion = "bogus"
	next.Spec.WorkerPools[0].Version = "bogus" // md-0 followed the control plane
	if got := flatten(ValidateUpdate(old, next)); len(got) != 1 || got[0].Error() != want {
		t.Errorf("upgrade: %q, want the one error %q", got, want)
	}
	// A pool's own bad version is still its own error.
	next.Spec.WorkerPools[1].Version = "v1.x"
	if got := flatten(ValidateUpdate(old, next)); len(got) != 2 || !strings.HasPrefix(got[1].Error(), `spec.workerPools[1].version: "v1.x": must be`) {
		t.Errorf("a pool's own bad version: %q", got)
	}
}

func TestValidatorBootstrapProviders(t *testing.T) {
	c := valid()
	c.Spec.Bootstrap.Provider = "talos"
	if err := (Validator{BootstrapProviders: []string{"talos"}}).Validate(c); err != nil {
		t.Errorf("custom list: %v", err)
	}
	err := (Validator{BootstrapProviders: []string{"kubeadm", "talos"}}).Validate(valid())
	if err != nil {
		t.Errorf("kubeadm in custom list: %v", err)
	}
}

func TestValidatorReplicaBounds(t *testing.T) {
	pools := func(rs ...int32) *capnv1.Cluster {
		c := valid()
		c.Spec.WorkerPools = nil
		for i, r := range rs {
			c.Spec.WorkerPools = append(c.Spec.WorkerPools, &capnv1.WorkerPool{Name: "md-" + string(rune('a'+i)), Provider: "sim", Replicas: r})
		}
		return c
	}
	tests := []struct {
		name string
		v    Validator
		c    *capnv1.Cluster
		want []string
	}{
		{"at the defaults", Validator{}, pools(1000, 1000, 1000, 1000, 997), nil},
		{"pool over the default", Validator{}, pools(1000000),
			[]string{"spec.workerPools[0].replicas: 1000000: must be at most 1000 per pool (the gateway's and cluster-planner's --max-pool-replicas)",
				"spec.workerPools: 1000003 machines in all"}},
		{"cluster over the default", Validator{}, pools(1000, 1000, 1000, 1000, 998),
			[]string{"spec.workerPools: 5001 machines in all (control plane and worker pools' replicas): must be at most 5000 per cluster"}},
		{"int32 pools do not overflow the total", Validator{MaxPoolReplicas: 1 << 31}, pools(1<<31-1, 1<<31-1),
			[]string{"spec.workerPools: 4294967297 machines in all"}},
		{"raised", Validator{MaxPoolReplicas: 20000, MaxClusterReplicas: 20003}, pools(20000), nil},
		{"lowered", Validator{MaxPoolReplicas: 2, MaxClusterReplicas: 6}, pools(2, 2),
			[]string{"spec.workerPools: 7 machines in all"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.v.Validate(tt.c)
			got := strings.Split(fmt.Sprint(err), "\n")
			if err == nil {
				got = nil
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d errors, want %d: %v", len(got), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("error %d: got %q, want prefix %q", i, got[i], w)
				}
			}
		})
	}
}

func TestFieldErrorText(t *testing.T) {
	e := &FieldError{Path: "spec.controlPlane.replicas", Value: int32(2), Reason: "must be odd and > 0 (1, 3 or 5)"}
	if got, want := e.Error(), "spec.controlPlane.replicas: 2: must be odd and > 0 (1, 3 or 5)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	e = &FieldError{Path: "spec.workerPools[0].replica", Reason: "unknown field"}
	if got, want := e.Error(), "spec.workerPools[0].replica: unknown field"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestDefault(t *testing.T) {
	c := &capnv1.Cluster{Spec: &capnv1.ClusterSpec{
		KubernetesVersion: "v1.34.0",
		ControlPlane:      &capnv1.ControlPlaneSpec{Provider: "sim", Bootstrap: &capnv1.BootstrapSpec{}},
		WorkerPools: []*capnv1.WorkerPool{
			{Name: "a"},
			{Name: "b", Version: "v1.33.0", Strategy: &capnv1.RolloutStrategy{Type: StrategyOnDelete}},
		},
	}}
	Default(c)
	s := c.Spec
	if s.ControlPlane.Replicas != 1 || s.ControlPlane.GetMaxSurge() != 1 || s.ControlPlane.Bootstrap.Provider != "kubeadm" {
		t.Errorf("control plane: %v", s.ControlPlane)
	}
	a, b := s.WorkerPools[0], s.WorkerPools[1]
	if a.Strategy.Type != StrategyRollingUpdate || a.Strategy.MaxSurge != "1" || a.Strategy.MaxUnavailable != "0" || a.DeletionOrder != "Random" || a.Version != "v1.34.0" {
		t.Errorf("pool a: %v", a)
	}
	if b.Strategy.MaxSurge != "" || b.Version != "v1.33.0" {
		t.Errorf("pool b: %v", b)
	}
	if n := s.Network; n.PodCidrs[0] != DefaultPodCIDR || n.ServiceCidrs[0] != DefaultServiceCIDR || n.ServiceDomain != "cluster.local" {
		t.Errorf("network: %v", n)
	}
	if s.Bootstrap.Provider != "kubeadm" {
		t.Errorf("bootstrap: %v", s.Bootstrap)
	}
	before := c.String()
	Default(c)
	if c.String() != before {
		t.Error("Default is not idempotent")
	}
	Default(&capnv1.Cluster{}) // no spec: nothing to do, no panic
}
