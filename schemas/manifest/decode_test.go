package manifest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

const sample = `
apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata:
  name: demo
  labels:
    team: infra
spec:
  kubernetesVersion: v1.34.2
  controlPlane:
    provider: sim
    replicas: 3
    maxSurge: 0
    template:
      parameters:
        size: large
  workerPools:
  - name: md-0
    provider: sim
    replicas: 3
    labels:
      tier: web
    taints:
    - key: dedicated
      value: web
      effect: NoSchedule
    strategy:
      type: RollingUpdate
      maxSurge: 25%
      maxUnavailable: 1
    deletionOrder: Oldest
    nodeDrainTimeout: 5m
    nodeDeletionTimeout: 30s
  network:
    podCidrs: [192.168.0.0/16]
    serviceCidrs: [10.96.0.0/12]
  bootstrap:
    provider: kubeadm
    tokenTtl: 15m
  health:
    nodeStartupTimeout: 10m
`

func TestDecodeYAML(t *testing.T) {
	c, err := Decode([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Spec
	if c.Metadata.Name != "demo" || s.KubernetesVersion != "v1.34.2" || s.ControlPlane.Replicas != 3 {
		t.Fatalf("decoded %v", c)
	}
	if s.ControlPlane.MaxSurge == nil || *s.ControlPlane.MaxSurge != 0 {
		t.Errorf("controlPlane.maxSurge = %v, want explicit 0", s.ControlPlane.MaxSurge)
	}
	if got := s.WorkerPools[0].Strategy.MaxUnavailable; got != "1" {
		t.Errorf("maxUnavailable: 1 decoded as %q, want \"1\"", got)
	}
	if got := s.Bootstrap.TokenTtl.AsDuration(); got != 15*time.Minute {
		t.Errorf("tokenTtl = %v, want 15m", got)
	}
	if got := s.Health.NodeStartupTimeout.AsDuration(); got != 10*time.Minute {
		t.Errorf("nodeStartupTimeout = %v", got)
	}
	if d, n := s.WorkerPools[0].NodeDrainTimeout.AsDuration(), s.WorkerPools[0].NodeDeletionTimeout.AsDuration(); d != 5*time.Minute || n != 30*time.Second {
		t.Errorf("nodeDrainTimeout, nodeDeletionTimeout = %v, %v; want 5m, 30s", d, n)
	}
	if err := Validate(c); err != nil {
		t.Errorf("sample does not validate: %v", err)
	}
}

func TestDecodeJSON(t *testing.T) {
	in := "{\n\t\"apiVersion\": \"capn.dev/v1alpha1\",\n\t\"kind\": \"Cluster\",\n\t\"metadata\": {\"name\": \"j\"},\n\t\"spec\": {\"kubernetes_version\": \"v1.33.0\", \"controlPlane\": {\"provider\": \"sim\", \"replicas\": 1}, \"bootstrap\": {\"tokenTtl\": \"900s\"}}\n}"
	c, err := Decode([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.KubernetesVersion != "v1.33.0" || c.Spec.Bootstrap.TokenTtl.AsDuration() != 15*time.Minute {
		t.Fatalf("decoded %v", c)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // every one must appear in the error
	}{
		{
			name: "unknown fields with paths",
			in: `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata: {name: x}
spec:
  kubernetesVersion: v1.34.0
  controlplane: {}
  workerPools:
  - name: a
    replica: 3
  - name: b
    strategy: {maxSurge: 1, surge: 2}
`,
			want: []string{
				`spec.controlplane: unknown field; did you mean "controlPlane"?`,
				`spec.workerPools[0].replica: unknown field; did you mean "replicas"?`,
				`spec.workerPools[1].strategy.surge: unknown field`,
			},
		},
		{
			name: "wrong types",
			in: `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata: {name: x, labels: {enabled: true}}
spec:
  kubernetesVersion: v1.34.0
  controlPlane: {provider: sim, replicas: three}
  workerPools: {name: a}
  paused: "yes please"
  bootstrap: {tokenTtl: 15 minutes}
`,
			want: []string{
				`metadata.labels[enabled]: true: expected a string, got a boolean: quote it`,
				`spec.controlPlane.replicas: expected an integer, got the string "three"`,
				`spec.workerPools: expected a list of objects, got an object`,
				`spec.paused: expected true or false, got the string "yes please"`,
				`spec.bootstrap.tokenTtl: "15 minutes": must be a duration`,
			},
		},
		{
			name: "duplicate field by both names",
			in:   "apiVersion: capn.dev/v1alpha1\nkind: Cluster\nspec: {kubernetesVersion: v1.1.1, kubernetes_version: v1.1.2}\n",
			want: []string{"spec.kubernetes_version: duplicate field"},
		},
		{
			name: "not capn",
			in:   "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nspec: {clusterNetwork: {}}\n",
			want: []string{`apiVersion: "cluster.x-k8s.io/v1beta1": unsupported: must be capn.dev/v1alpha1 (this looks like a Cluster API manifest)`},
		},
		{
			name: "wrong kind",
			in:   "apiVersion: capn.dev/v1alpha1\nkind: Machine\n",
			want: []string{`kind: "Machine": unsupported: must be Cluster`},
		},
		{
			name: "int32 range",
			in:   "apiVersion: capn.dev/v1alpha1\nkind: Cluster\nspec: {controlPlane: {replicas: 4294967296}}\n",
			want: []string{"spec.controlPlane.replicas: 4294967296: out of range"},
		},
		{
			name: "syntax",
			in:   "apiVersion: capn.dev/v1alpha1\nkind: [\n",
			want: []string{"parse manifest: yaml: line"},
		},
		{
			name: "not a mapping",
			in:   "- a\n- b\n",
			want: []string{"must be a mapping"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.in))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestDecodeFieldErrorsAreTyped(t *testing.T) {
	_, err := Decode([]byte("apiVersion: capn.dev/v1alpha1\nkind: Cluster\nspec: {nope: 1}\n"))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Path != "spec.nope" || fe.Reason != "unknown field" {
		t.Fatalf("got %#v from %v", fe, err)
	}
}

func TestDecodeAll(t *testing.T) {
	in := "# leading comment\n---\n" + sample + "---\n# only a comment\n---\napiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: two}\n...\n"
	cs, err := DecodeAll([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].Metadata.Name != "demo" || cs[1].Metadata.Name != "two" {
		t.Fatalf("got %d clusters: %v", len(cs), cs)
	}
	if _, err := Decode([]byte(in)); !errors.Is(err, ErrMultipleDocuments) {
		t.Errorf("Decode of two documents: %v, want ErrMultipleDocuments", err)
	}
	if _, err := Decode([]byte("# nothing\n")); !errors.Is(err, ErrEmpty) {
		t.Errorf("Decode of nothing: %v, want ErrEmpty", err)
	}

	_, err = DecodeAll([]byte("apiVersion: capn.dev/v1alpha1\nkind: Cluster\n---\napiVersion: capn.dev/v1alpha1\nkind: Cluster\nspec: {x: 1, z: 2}\n"))
	if err == nil || !strings.Contains(err.Error(), "document 2: spec.x: unknown field\ndocument 2: spec.z: unknown field") {
		t.Errorf("errors do not name their document: %v", err)
	}

	arr := `[{"apiVersion":"capn.dev/v1alpha1","kind":"Cluster","metadata":{"name":"a"}},{"apiVersion":"capn.dev/v1alpha1","kind":"Cluster","metadata":{"name":"b"}}]`
	cs, err = DecodeAll([]byte(arr))
	if err != nil || len(cs) != 2 || cs[1].Metadata.Name != "b" {
		t.Fatalf("JSON array: %v %v", cs, err)
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	c, err := Decode([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	c.Metadata.Generation = 7
	out, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, want := range []string{"apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata:", "tokenTtl: 15m\n", "generation: 7\n", "maxSurge: 25%"} {
		if !strings.Contains(text, want) {
			t.Errorf("YAML lacks %q:\n%s", want, text)
		}
	}
	back, err := Decode(out)
	if err != nil {
		t.Fatalf("re-decode: %v\n%s", err, text)
	}
	if !proto.Equal(c, back) {
		t.Errorf("round trip changed the cluster:\n%v\n%v", c, back)
	}
	all, err := EncodeAll([]*capnv1.Cluster{c, back})
	if err != nil {
		t.Fatal(err)
	}
	if cs, err := DecodeAll(all); err != nil || len(cs) != 2 {
		t.Errorf("EncodeAll/DecodeAll: %d %v", len(cs), err)
	}
}

func TestProtoDuration(t *testing.T) {
	tests := map[time.Duration]string{
		15 * time.Minute:        "900s",
		1500 * time.Millisecond: "1.5s",
		-2 * time.Second:        "-2s",
		time.Nanosecond:         "0.000000001s",
		0:                       "0s",
	}
	for d, want := range tests {
		if got := protoDuration(d); got != want {
			t.Errorf("protoDuration(%v) = %q, want %q", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{time.Hour: "1h", 90 * time.Minute: "1h30m", 15 * time.Minute: "15m", 90 * time.Second: "1m30s"} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
