package bootstrapper_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/replyseal"
	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/bootstrapper"
)

func TestFetchAnswersOnlyTheCurrentDataOfAWantedMachine(t *testing.T) {
	e := newEnv(t)
	ring := keyring(t, newKey(t))
	e.start(ring)
	e.applyCluster("c1", nil)
	e.reportEndpoint("c1")
	machines := store.NewBucket(e.kv(events.BucketDesired), func() *capnv1.Machine { return new(capnv1.Machine) })
	for _, m := range []string{"w-0", "w-1"} {
		if _, err := machines.Create(context.Background(), "machine.c1."+m, &capnv1.Machine{Metadata: &capnv1.ObjectMeta{Name: m}, Spec: &capnv1.MachineSpec{Provider: "sim", Role: "worker", Version: "v1.34.2"}}); err != nil {
			t.Fatal(err)
		}
	}
	// No command: the bootstrapper generates a new desired machine's data
	// by itself (machines.go).
	got := e.collect("c1")
	ready := map[string]*capnv1.BootstrapReady{}
	for range 2 {
		var r capnv1.BootstrapReady
		if err := events.DataAs(next(t, got).Event, &r); err != nil {
			t.Fatal(err)
		}
		ready[r.GetMachine()] = &r
	}
	// w-1 is then being deleted.
	if _, _, err := machines.Mutate(context.Background(), "machine.c1.w-1", func(m *capnv1.Machine, _ bool) (*capnv1.Machine, error) {
		m.Metadata.DeletionTimestamp = timestamppb.Now()
		return m, nil
	}); err != nil {
		t.Fatal(err)
	}
	nc, _ := e.srv.Connect(t)
	request := func(subject, checksum string, credential ...string) *nats.Msg {
		t.Helper()
		m := nats.NewMsg(subject)
		if checksum != "" {
			m.Header.Set(bootstrapper.HeaderChecksum, checksum)
		}
		for _, c := range credential {
			m.Header.Set(bootstrapper.HeaderCredential, c)
		}
		reply, err := nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatalf("request %s: %v", subject, err)
		}
		return reply
	}
	subject := func(m string) string { return bootstrapper.FetchSubjectRoot + ".c1." + m }
	// The machine's provider gets its credential; another provider does not.
	credential := func(provider, m string) *nats.Msg {
		return request(bootstrapper.CredentialSubjectRoot+"."+provider+".c1."+m, ready[m].GetChecksum())
	}
	credReply := credential("sim", "w-0")
	if code := credReply.Header.Get(bootstrapper.HeaderErrorCode); code != "" || len(credReply.Data) < 43 {
		t.Fatalf("credential refused: %s %s (%d bytes)", code, credReply.Header.Get(bootstrapper.HeaderError), len(credReply.Data))
	}
	cred := string(credReply.Data)
	if again := credential("sim", "w-0"); string(again.Data) != cred {
		t.Fatal("a second credential request got another credential")
	}
	if r := credential("docker", "w-0"); r.Header.Get(bootstrapper.HeaderErrorCode) != "403" || len(r.Data) != 0 {
		t.Fatalf("another provider got w-0's credential: %q %s", r.Header.Get(bootstrapper.HeaderErrorCode), r.Header.Get(bootstrapper.HeaderError))
	}

	reply := request(subject("w-0"), ready["w-0"].GetChecksum(), cred)
	var data capnv1.BootstrapData
	if code := reply.Header.Get(bootstrapper.HeaderErrorCode); code != "" {
		t.Fatalf("fetch refused: %s %s", code, reply.Header.Get(bootstrapper.HeaderError))
	}
	if bytes.Contains(reply.Data, []byte("kubeadm")) {
		t.Fatal("the reply is not sealed: another node agent reading the inbox would read it")
	}
	plain, err := replyseal.Open(cred, subject("w-0"), reply.Data)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(plain, &data); err != nil {
		t.Fatal(err)
	}
	if data.GetChecksum() != ready["w-0"].GetChecksum() || data.GetFormat() != "cloud-config" || !bytes.Contains(data.GetData(), []byte("kubeadm join")) {
		t.Fatalf("fetched %s %s:\n%.200s", data.GetFormat(), data.GetChecksum(), data.GetData())
	}
	if data.GetToken() != "" || data.GetInputHash() != "" {
		t.Errorf("the reply carries more than format, data and checksum: %v", data.GetToken() != "")
	}

	// The bootstrapper's cache sees the deletion soon after it is written.
	natstest.WaitFor(t, 5*time.Second, "w-1's deletion seen", func() bool {
		return request(subject("w-1"), ready["w-1"].GetChecksum(), cred).Header.Get(bootstrapper.HeaderErrorCode) == "404"
	})

	tests := []struct {
		name, subject, checksum, credential, code string
	}{
		{"no checksum", subject("w-0"), "", cred, "400"},
		{"no credential", subject("w-0"), ready["w-0"].GetChecksum(), "", "403"},
		{"a wrong credential", subject("w-0"), ready["w-0"].GetChecksum(), cred[1:] + "A", "403"},
		{"stale checksum", subject("w-0"), "sha256:00", cred, "409"},
		{"another machine's checksum", subject("w-0"), ready["w-1"].GetChecksum(), cred, "409"},
		{"machine being deleted", subject("w-1"), ready["w-1"].GetChecksum(), cred, "404"},
		{"unknown machine", subject("w-9"), "sha256:00", cred, "404"},
		{"malformed subject", bootstrapper.FetchSubjectRoot + ".c1", "sha256:00", cred, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.code == "" {
				// Not matched by the subscription: nobody answers.
				if _, err := nc.Request(tt.subject, nil, 300*time.Millisecond); err == nil {
					t.Fatal("a malformed subject was answered")
				}
				return
			}
			reply := request(tt.subject, tt.checksum, tt.credential)
			if got := reply.Header.Get(bootstrapper.HeaderErrorCode); got != tt.code || len(reply.Data) != 0 {
				t.Fatalf("code %q (%s), %d bytes; want %s and no data", got, reply.Header.Get(bootstrapper.HeaderError), len(reply.Data), tt.code)
			}
		})
	}
}
