package bootstrapper_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/schemas/annotations"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/seal"
)

// putBootstrapSecret writes a bootstrap secret as the gateway does (sealed).
func (e *env) putBootstrapSecret(ring *seal.Keyring, name string, data map[string][]byte) {
	e.t.Helper()
	b := store.NewBucket(e.kv(events.BucketSecrets), func() *capnv1.BootstrapSecret { return new(capnv1.BootstrapSecret) }, store.WithSealer(ring))
	if _, _, err := b.Mutate(context.Background(), keys.BootstrapSecret(name), func(*capnv1.BootstrapSecret, bool) (*capnv1.BootstrapSecret, error) {
		return &capnv1.BootstrapSecret{Name: name, Data: data}, nil
	}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) bootstrapData(ring *seal.Keyring, key string) string {
	e.t.Helper()
	boots := store.NewBucket(e.kv(events.BucketSecrets), func() *capnv1.BootstrapData { return new(capnv1.BootstrapData) }, store.WithSealer(ring))
	d, _, err := boots.Get(context.Background(), key)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(d.GetData())
}

// A file with a secretRef gets the secret's value in every format
// (cloud-config, script, ignition, windows); the value travels in no event
// and sits only in sealed records. A missing secret, then a missing key,
// make the bootstrapper answer bootstrap.waiting naming them; once the
// secret holds the key the same machine's ask is answered ready. A changed
// value gives new data.
func TestFilesFromBootstrapSecrets(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.start(ring)
	e.applyCluster("c1", nil)
	e.reportEndpoint("c1")
	got := e.collect("c1")
	const value = "s3cr3t-registry-token-7f1"
	ref := &capnv1.FileSecretRef{Name: "registry", Key: "token"}
	linux := &capnv1.BootstrapSpec{Files: []*capnv1.File{{Path: "/etc/registry/token", Permissions: "0600", SecretRef: ref}}}
	wanted := map[string]bool{}
	ask := func(machine, id, os string, spec *capnv1.BootstrapSpec) *events.Message {
		t.Helper()
		if !wanted[machine] {
			e.want("c1", machine)
			wanted[machine] = true
		}
		cmd := &capnv1.GenerateBootstrap{Cluster: "c1", Machine: machine, Role: "worker", Version: "v1.34.2", Bootstrap: spec, Os: os}
		if _, err := e.pub.Publish(context.Background(), events.CommandSubject("bootstrap", "generate", "c1", machine), events.TypeGenerateBootstrap, id, cmd); err != nil {
			t.Fatal(err)
		}
		m := next(t, got)
		if strings.Contains(string(m.Event.Data()), value) {
			t.Fatalf("event %s carries the secret's value", m.Event.Type())
		}
		return m
	}
	waiting := func(m *events.Message, want ...string) {
		t.Helper()
		var w capnv1.BootstrapWaiting
		if m.Event.Type() != events.TypeBootstrapWaiting || events.DataAs(m.Event, &w) != nil {
			t.Fatalf("got %s %s, want %s", m.Event.Type(), m.Event.Data(), events.TypeBootstrapWaiting)
		}
		if w.GetReason() != annotations.ReasonBootstrapSecretNotFound || w.GetSecret() != "registry" {
			t.Fatalf("waiting %q secret %q: want reason %s naming registry", w.GetReason(), w.GetSecret(), annotations.ReasonBootstrapSecretNotFound)
		}
		for _, s := range want {
			if !strings.Contains(w.GetMessage(), s) {
				t.Fatalf("waiting message %q does not say %q", w.GetMessage(), s)
			}
		}
	}
	ready := func(m *events.Message) *capnv1.BootstrapReady {
		t.Helper()
		r := new(capnv1.BootstrapReady)
		if m.Event.Type() != events.TypeBootstrapReady || events.DataAs(m.Event, r) != nil {
			t.Fatalf("got %s %s, want %s", m.Event.Type(), m.Event.Data(), events.TypeBootstrapReady)
		}
		return r
	}

	waiting(ask("w-0", "a1", "", linux), `bootstrap secret "registry" not found`, "/etc/registry/token")
	e.putBootstrapSecret(ring, "registry", map[string][]byte{"other": []byte("x")})
	waiting(ask("w-0", "a2", "", linux), `has no key "token"`)
	e.putBootstrapSecret(ring, "registry", map[string][]byte{"token": []byte(value)})
	r := ready(ask("w-0", "a3", "", linux))
	if d := e.bootstrapData(ring, r.GetSecretKey()); !strings.HasPrefix(d, "#cloud-config") || !holds(d, value) {
		t.Fatalf("cloud-config does not write the secret's value:\n%.400s", d)
	}

	for _, c := range []struct {
		machine, os string
		spec        *capnv1.BootstrapSpec
		prefix      string
	}{
		{"w-script", "", &capnv1.BootstrapSpec{Provider: "script", UserData: "#!/bin/sh\necho hi\n", Files: linux.Files}, ""},
		{"w-ign", "", &capnv1.BootstrapSpec{Format: "ignition", Files: linux.Files}, "{"},
		{"w-win", "windows", &capnv1.BootstrapSpec{Files: []*capnv1.File{{Path: `C:\k\registry-token`, SecretRef: ref}}}, "#cloud-config"},
	} {
		r := ready(ask(c.machine, "b-"+c.machine, c.os, c.spec))
		d := e.bootstrapData(ring, r.GetSecretKey())
		if !strings.HasPrefix(d, c.prefix) || !holds(d, value) {
			t.Errorf("%s: bootstrap data (format %s) does not write the secret's value:\n%.600s", c.machine, r.GetFormat(), d)
		}
	}

	// A new value: the next ask of a machine renders it (new checksum).
	e.putBootstrapSecret(ring, "registry", map[string][]byte{"token": []byte("rotated-value-9")})
	r2 := ready(ask("w-0", "a4", "", linux))
	if r2.GetChecksum() == r.GetChecksum() || !holds(e.bootstrapData(ring, r2.GetSecretKey()), "rotated-value-9") {
		t.Fatal("a changed bootstrap secret did not give new bootstrap data")
	}
}

// holds says whether bootstrap data writes value: as is, or base64 (as
// cloud-config's b64 write_files and Ignition's data URLs do).
func holds(data, value string) bool {
	return strings.Contains(data, value) || strings.Contains(data, base64.StdEncoding.EncodeToString([]byte(value)))
}
