package keys_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/capn-dev/capn/schemas/keys"
)

func TestKeys(t *testing.T) {
	tests := []struct {
		key  string
		want keys.Key
	}{
		{keys.Cluster("c1"), keys.Key{Kind: keys.KindCluster, Cluster: "c1"}},
		{keys.Machine("c1", "m1"), keys.Key{Kind: keys.KindMachine, Cluster: "c1", Name: "m1"}},
		{keys.Infra("sim", "c1", "m1"), keys.Key{Kind: keys.KindInfra, Provider: "sim", Cluster: "c1", Name: "m1"}},
		{keys.InfraCluster("sim", "c1"), keys.Key{Kind: keys.KindInfra, Provider: "sim", Cluster: "c1", Name: "_"}},
		{keys.Node("c1", "m1"), keys.Key{Kind: keys.KindNode, Cluster: "c1", Name: "m1"}},
		{keys.Remediation("c1", "md-0"), keys.Key{Kind: keys.KindRemediation, Cluster: "c1", Name: "md-0"}},
		{keys.Autoscaler("c1", "md-0"), keys.Key{Kind: keys.KindAutoscaler, Cluster: "c1", Name: "md-0"}},
		{keys.Provider("docker"), keys.Key{Kind: keys.KindProvider, Provider: "docker"}},
		{keys.Secrets("c1"), keys.Key{Kind: keys.KindSecrets, Cluster: "c1"}},
		{keys.PKI("c1"), keys.Key{Kind: keys.KindPKI, Cluster: "c1"}},
		{keys.Kubeconfig("c1"), keys.Key{Kind: keys.KindKubeconfig, Cluster: "c1"}},
		{keys.Bootstrap("c1", "m1"), keys.Key{Kind: keys.KindBootstrap, Cluster: "c1", Name: "m1"}},
		{keys.AddonSet("cni"), keys.Key{Kind: keys.KindAddonSet, Name: "cni"}},
		{keys.Addon("c1", "cni"), keys.Key{Kind: keys.KindAddon, Cluster: "c1", Name: "cni"}},
		{keys.AddonSecret("creds"), keys.Key{Kind: keys.KindAddonSecret, Name: "creds"}},
		{keys.BootstrapSecret("tls"), keys.Key{Kind: keys.KindBootstrapSecret, Name: "tls"}},
		{keys.BackupSchedule, keys.Key{Kind: keys.KindBackup, Name: "schedule"}},
		{keys.Maintenance("c1"), keys.Key{Kind: keys.KindMaintenance, Cluster: "c1"}},
		{keys.K8sVersionsDefault, keys.Key{Kind: keys.KindK8sVersions, Name: "default"}},
		{keys.ControlPlane("c1"), keys.Key{Kind: keys.KindControlPlane, Cluster: "c1"}},
		{keys.ExternalKubeconfig("prod"), keys.Key{Kind: keys.KindExternalKubeconfig, Name: "prod"}},
	}
	wantKeys := []string{"cluster.c1", "machine.c1.m1", "infra.sim.c1.m1", "infra.sim.c1._", "node.c1.m1",
		"remediation.c1.md-0", "autoscaler.c1.md-0", "provider.docker", "secrets.c1", "pki.c1", "kubeconfig.c1", "bootstrap.c1.m1",
		"addonset.cni", "addon.c1.cni", "addonsecret.creds", "bootstrapsecret.tls", "backup.schedule",
		"maintenance.c1", "kubernetesversions.default", "controlplane.c1", "externalkubeconfig.prod"}
	for i, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if tt.key != wantKeys[i] {
				t.Errorf("constructed %q, want today's %q", tt.key, wantKeys[i])
			}
			got, err := keys.Parse(tt.key)
			if err != nil || got != tt.want {
				t.Fatalf("Parse = %+v, %v; want %+v", got, err, tt.want)
			}
			if got.String() != tt.key {
				t.Errorf("String = %q", got.String())
			}
			if !strings.HasPrefix(tt.key, string(got.Kind)+".") {
				t.Errorf("kind %q is not the key's first token", got.Kind)
			}
		})
	}
	prefixes := map[string]string{
		keys.MachinesOf("c1"): "machine.c1.", keys.NodesOf("c1"): "node.c1.", keys.RemediationsOf("c1"): "remediation.c1.",
		keys.BootstrapsOf("c1"): "bootstrap.c1.", keys.InfraOf("sim"): "infra.sim.", keys.ClusterPrefix: "cluster.",
		keys.InfraPrefix: "infra.", keys.ProviderPrefix: "provider.", keys.AddonsOf("c1"): "addon.c1.",
		keys.AddonSetPrefix: "addonset.", keys.AddonPrefix: "addon.", keys.AddonSecretPrefix: "addonsecret.", keys.BootstrapSecretPrefix: "bootstrapsecret.",
		keys.BackupPrefix:      "backup.",
		keys.MaintenancePrefix: "maintenance.", keys.K8sVersionsPrefix: "kubernetesversions.",
		keys.ControlPlanePrefix: "controlplane.", keys.ExternalKubeconfigPrefix: "externalkubeconfig.",
	}
	// An add-on set or secret belongs to no cluster: a watcher queueing
	// clusters skips it.
	for _, k := range []string{keys.AddonSet("cni"), keys.AddonSecret("creds"), keys.BootstrapSecret("tls")} {
		if c := keys.ClusterOf(k); c != "" {
			t.Errorf("ClusterOf(%q) = %q, want none", k, c)
		}
	}
	if c := keys.ClusterOf(keys.Addon("c1", "cni")); c != "c1" {
		t.Errorf("ClusterOf(addon.c1.cni) = %q", c)
	}
	for got, want := range prefixes {
		if got != want {
			t.Errorf("prefix %q, want %q", got, want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, key := range []string{
		"", "cluster", "cluster.", "cluster.c1.extra", "machine.c1", "machine.c1.", "machine..m1",
		"infra.sim.c1", "infra.sim.c1.m1.x", "node.c1.*", "machine.c1.>", "provider.", "unknown.c1",
		"Cluster.c1", "pki.c1.ca", "bootstrap.c1", "secrets.c 1",
		"addonset", "addonset.a.b", "addon.c1", "addon.c1.", "addon..cni", "addonsecret.a.b", "addonsecret.*", "backup.", "backup.a.b",
	} {
		if k, err := keys.Parse(key); !errors.Is(err, keys.ErrMalformed) {
			t.Errorf("Parse(%q) = %+v, %v; want ErrMalformed", key, k, err)
		}
	}
}

func TestSubjects(t *testing.T) {
	tests := []struct {
		subject, exact string
		want           keys.Subject
	}{
		{keys.Event("machine", "running", "c1", "m1"), "capn.evt.machine.running.c1.m1",
			keys.Subject{Root: keys.EventsRoot, Entity: "machine", Verb: "running", Cluster: "c1", Object: "m1"}},
		{keys.Drift("sim", "c1", "m1"), "capn.evt.drift.sim.c1.m1",
			keys.Subject{Root: keys.EventsRoot, Entity: "drift", Verb: "sim", Provider: "sim", Cluster: "c1", Object: "m1"}},
		{keys.Command("bootstrap", "generate", "c1", "m1"), "capn.cmd.bootstrap.generate.c1.m1",
			keys.Subject{Root: keys.CommandsRoot, Entity: "bootstrap", Verb: "generate", Cluster: "c1", Object: "m1"}},
		{keys.ProviderCommand("sim", "cluster", "ensure", "c1", keys.ClusterObject), "capn.provider.sim.cluster.ensure.c1._",
			keys.Subject{Root: keys.ProvidersRoot, Provider: "sim", Entity: "cluster", Verb: "ensure", Cluster: "c1", Object: "_"}},
		{keys.Health("c1", "m1", "heartbeat"), "capn.health.c1.m1.heartbeat",
			keys.Subject{Root: keys.HealthRoot, Entity: "heartbeat", Cluster: "c1", Object: "m1"}},
		{keys.BootstrapFetch("c1", "m1"), "capn.bootstrap.fetch.c1.m1",
			keys.Subject{Root: keys.BootstrapFetchRoot, Cluster: "c1", Object: "m1"}},
		{keys.BootstrapCredential("sim", "c1", "m1"), "capn.bootstrap.credential.sim.c1.m1",
			keys.Subject{Root: keys.BootstrapCredentialRoot, Provider: "sim", Cluster: "c1", Object: "m1"}},
		{keys.ControlPlaneCommand("hosted", keys.ControlPlaneEnsure, "c1"), "capn.controlplane.hosted.ensure.c1",
			keys.Subject{Root: keys.ControlPlaneRoot, Entity: "hosted", Verb: "ensure", Cluster: "c1"}},
	}
	for _, tt := range tests {
		t.Run(tt.exact, func(t *testing.T) {
			if tt.subject != tt.exact {
				t.Errorf("constructed %q, want today's %q", tt.subject, tt.exact)
			}
			got, err := keys.ParseSubject(tt.subject)
			if err != nil || got != tt.want {
				t.Fatalf("ParseSubject = %+v, %v; want %+v", got, err, tt.want)
			}
			if got.String() != tt.subject {
				t.Errorf("String = %q", got.String())
			}
		})
	}
	for _, s := range []string{"", "capn", "capn.evt", "capn.evt.machine.running.c1", "capn.evt.machine.running.c1.m1.x",
		"capn.health.c1.m1", "capn.health.c1.*.heartbeat", "capn.provider.sim.>", "capn.bootstrap.fetch.c1",
		"capn.bootstrap.credential.sim.c1", "capn.ingest.c1.m1.x", "nats.evt.a.b.c.d", "capn.cmd.a..c.d"} {
		if got, err := keys.ParseSubject(s); !errors.Is(err, keys.ErrMalformed) {
			t.Errorf("ParseSubject(%q) = %+v, %v; want ErrMalformed", s, got, err)
		}
	}
}

// FuzzParse: whatever Parse and ParseSubject accept, String gives back
// exactly, and a key built from valid names parses to those names.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"cluster.c1", "machine.c1.m1", "infra.sim.c1._", "provider.p", "capn.evt.drift.sim.c1.m1",
		"capn.health.c1.m1.heartbeat", "capn.provider.sim.machine.create.c1.m1", "machine.c1.m1.x", "capn.bootstrap.fetch.a.b",
		"addonset.cni", "addon.c1.cni", "addonsecret.creds", "addonset.a.b"} {
		f.Add(s, "c1", "m1")
	}
	f.Fuzz(func(t *testing.T, s, c, m string) {
		if k, err := keys.Parse(s); err == nil && k.String() != s {
			t.Errorf("Parse(%q).String() = %q", s, k.String())
		}
		if sub, err := keys.ParseSubject(s); err == nil && sub.String() != s {
			t.Errorf("ParseSubject(%q).String() = %q", s, sub.String())
		}
		if c == "" || m == "" || strings.ContainsAny(c+m, ".*> \t\r\n") {
			return
		}
		if k, err := keys.Parse(keys.Infra(c, c, m)); err != nil || k != (keys.Key{Kind: keys.KindInfra, Provider: c, Cluster: c, Name: m}) {
			t.Errorf("Parse(Infra(%q, %q, %q)) = %+v, %v", c, c, m, k, err)
		}
		if k, err := keys.Parse(keys.Addon(c, m)); err != nil || k != (keys.Key{Kind: keys.KindAddon, Cluster: c, Name: m}) {
			t.Errorf("Parse(Addon(%q, %q)) = %+v, %v", c, m, k, err)
		}
		if k, err := keys.Parse(keys.AddonSet(m)); err != nil || k != (keys.Key{Kind: keys.KindAddonSet, Name: m}) || keys.ClusterOf(keys.AddonSet(m)) != "" {
			t.Errorf("Parse(AddonSet(%q)) = %+v, %v", m, k, err)
		}
		if s, err := keys.ParseSubject(keys.Drift(c, c, m)); err != nil || s.Provider != c || s.Cluster != c || s.Object != m {
			t.Errorf("ParseSubject(Drift(%q, %q, %q)) = %+v, %v", c, c, m, s, err)
		}
	})
}

// A backup record belongs to no cluster: a watcher that queues clusters
// by ClusterOf must not take "schedule" for one.
func TestClusterOf(t *testing.T) {
	for key, want := range map[string]string{
		"cluster.c1": "c1", "machine.c1.m1": "c1", "infra.sim.c1._": "c1",
		"provider.sim": "", keys.BackupSchedule: "", "bad": "",
		keys.Maintenance("c1"): "c1", keys.K8sVersionsDefault: "",
	} {
		if got := keys.ClusterOf(key); got != want {
			t.Errorf("ClusterOf(%q) = %q, want %q", key, got, want)
		}
	}
}
