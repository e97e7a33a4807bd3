package kubeadm

import (
	"bytes"
	"encoding/base64"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"pgregory.net/rapid"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/bootstraptest"
	yaml "go.yaml.in/yaml/v2"
)

// joinSpecs are the specs a join is rendered with in these tests.
func joinSpecs() map[string]*capnv1.BootstrapSpec {
	full := bootstraptest.FullSpec("")
	full.IgnorePreflightErrors = []string{"ImagePull", "Port-10250"}
	full.CommandTimeout = durationpb.New(90 * time.Second)
	return map[string]*capnv1.BootstrapSpec{
		"empty":         {},
		"full":          full,
		"files only":    {Files: full.Files},
		"commands only": {PreCommands: full.PreCommands, PostCommands: full.PostCommands},
		"kubelet args":  {KubeletExtraArgs: map[string]string{"max-pods": "110", "node-ip": "10.0.0.1"}},
	}
}

// Every join rendered from its pool's template is byte for byte the full
// render, for every role, spec, labels and taints, and for node names and
// tokens that YAML writes quoted.
func TestJoinTemplateRendersTheSameBytes(t *testing.T) {
	names := []string{"prod-1-md-0-abcde", "w", "123", "1e5", "0x1f", "yes", "no", "null", "on", "true", "n",
		"a.b.example.com", strings.Repeat("a", 63) + "." + strings.Repeat("b", 63)}
	tokens := []token.Token{bootstraptest.Token, {ID: "123456", Secret: "1234567890123456"}, {ID: "000000", Secret: "0000000000000000"},
		{ID: "1e1000", Secret: "0000000000000000"}, {ID: "abcdef", Secret: "0123456789abcdef"}}
	for specName, spec := range joinSpecs() {
		for _, m := range []bootstraptest.Machine{bootstraptest.JoinWorker, bootstraptest.JoinControl} {
			for _, labels := range []map[string]string{nil, bootstraptest.Labels} {
				base := bootstraptest.NewInput(t, m, spec, labels, bootstraptest.Taints)
				// Each name with the first token, each token with the first name.
				var pairs [][2]int
				for i := range names {
					pairs = append(pairs, [2]int{i, 0})
				}
				for j := range tokens[1:] {
					pairs = append(pairs, [2]int{0, j + 1})
				}
				for _, p := range pairs {
					name, tok := names[p[0]], tokens[p[1]]
					{
						in := base
						in.Machine, in.Token = name, tok
						want, err := renderCloudConfig(in)
						if err != nil {
							t.Fatal(err)
						}
						got, err := New().Render(in)
						if err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(got.Data, want.Data) || got.Format != want.Format {
							t.Fatalf("%s %s, name %q, token %s: the template's render differs from the full one:\n%s\n----\n%s",
								m.Name(), specName, name, tok.Value(), got.Data, want.Data)
						}
					}
				}
				in := base
				if _, ok := renderJoin(in); !ok {
					t.Errorf("%s %s: no template for an ordinary join", m.Name(), specName)
				}
			}
		}
	}
}

// The same for any valid node name and token.
func TestJoinTemplateProperty(t *testing.T) {
	base := bootstraptest.NewInput(t, bootstraptest.JoinWorker, joinSpecs()["full"], bootstraptest.Labels, bootstraptest.Taints)
	control := bootstraptest.NewInput(t, bootstraptest.JoinControl, joinSpecs()["full"], bootstraptest.Labels, bootstraptest.Taints)
	label := rapid.StringMatching(`[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?`)
	rapid.Check(t, func(t *rapid.T) {
		in := base
		if rapid.Bool().Draw(t, "control plane") {
			in = control
		}
		in.Machine = strings.Join(rapid.SliceOfN(label, 1, 4).Draw(t, "name"), ".")
		in.Token = token.Token{ID: rapid.StringMatching(`[a-z0-9]{6}`).Draw(t, "id"), Secret: rapid.StringMatching(`[a-z0-9]{16}`).Draw(t, "secret")}
		want, err := renderCloudConfig(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := New().Render(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("name %q, token %s: the template's render differs from the full one", in.Machine, in.Token.Value())
		}
	})
}

// plainScalar writes what YAML writes.
func TestPlainScalar(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.OneOf(rapid.StringMatching(`[a-z0-9.-]{0,12}`), rapid.String()).Draw(t, "s")
		b, err := yaml.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := plainScalar(s)
		if ok && got+"\n" != string(b) {
			t.Fatalf("plainScalar(%q) = %q, yaml writes %q", s, got, b)
		}
		if !ok && !strings.Contains(strings.TrimSuffix(string(b), "\n"), "\n") {
			t.Fatalf("plainScalar(%q) refused a one-line %q", s, b)
		}
	})
}

// What plainBase64 passes, YAML writes plain.
func TestPlainBase64(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := base64.StdEncoding.EncodeToString(rapid.SliceOf(rapid.Byte()).Draw(t, "bytes"))
		if !plainBase64(s) {
			return
		}
		if b, err := yaml.Marshal(s); err != nil || string(b) != s+"\n" {
			t.Fatalf("yaml writes %q as %q", s, b)
		}
	})
	for _, s := range []string{"", "12345678", "+abcdef", "/abcdef", "yes", "abc def", "abcdef\n"} {
		if plainBase64(s) {
			t.Errorf("plainBase64(%q) = true", s)
		}
	}
}

// The template key changes with every field of the Input but the node
// name and the token, and a new field of Input must be added here (and
// to templateKey).
func TestTemplateKeyCoversInput(t *testing.T) {
	base := bootstraptest.NewInput(t, bootstraptest.JoinControl, joinSpecs()["full"], bootstraptest.Labels, bootstraptest.Taints)
	change := map[string]func(in *bootstrap.Input){
		"Cluster":           func(in *bootstrap.Input) { in.Cluster += "x" },
		"Role":              func(in *bootstrap.Input) { in.Role = bootstrap.RoleWorker },
		"FirstControlPlane": func(in *bootstrap.Input) { in.FirstControlPlane = true },
		"KubernetesVersion": func(in *bootstrap.Input) { in.KubernetesVersion = "v1.35.0" },
		"OS":                func(in *bootstrap.Input) { in.OS = bootstrap.OSWindows },
		"Endpoint":          func(in *bootstrap.Input) { in.Endpoint.Port++ },
		"Network":           func(in *bootstrap.Input) { in.Network = &capnv1.NetworkSpec{ServiceDomain: "x.local"} },
		"Spec":              func(in *bootstrap.Input) { in.Spec = &capnv1.BootstrapSpec{PreCommands: []string{"x"}} },
		"Labels":            func(in *bootstrap.Input) { in.Labels = map[string]string{"tier": "db"} },
		"Taints":            func(in *bootstrap.Input) { in.Taints = in.Taints[:1] },
		"PKI":               func(in *bootstrap.Input) { in.PKI.ServiceAccountKey = nil },
		"TokenTTL":          func(in *bootstrap.Input) { in.TokenTTL += time.Minute },
		"CACertHash":        func(in *bootstrap.Input) { in.CACertHash = "sha256:" + strings.Repeat("0", 64) },
		"Machine":           nil, // what a template leaves out
		"Token":             nil,
	}
	var fields []string
	for f := range reflect.TypeFor[bootstrap.Input]().Fields() {
		fields = append(fields, f.Name)
	}
	slices.Sort(fields)
	var known []string
	for k := range change {
		known = append(known, k)
	}
	slices.Sort(known)
	if !slices.Equal(fields, known) {
		t.Fatalf("bootstrap.Input has fields %v, this test (and templateKey) knows %v", fields, known)
	}
	k := templateKey(base)
	for name, f := range change {
		in := base
		in.Labels, in.Taints = maps.Clone(base.Labels), slices.Clone(base.Taints)
		if f == nil {
			in.Machine, in.Token = "other", tokenStandIn
			if templateKey(in) != k {
				t.Errorf("%s changed the key", name)
			}
			continue
		}
		f(&in)
		if templateKey(in) == k {
			t.Errorf("%s did not change the key", name)
		}
	}
}
