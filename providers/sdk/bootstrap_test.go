package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/events/replyseal"
	"github.com/capn-dev/capn/providers/sdk"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func TestFetchBootstrap(t *testing.T) {
	srv := natstest.Start(t)
	nc, _ := srv.Connect(t)
	data := []byte("#cloud-config\n")
	good := sdk.Checksum(data)
	// The stand-in bootstrapper answers per machine.
	answers := map[string]func(m *nats.Msg) *nats.Msg{
		"ok": func(m *nats.Msg) *nats.Msg {
			r := nats.NewMsg(m.Reply)
			b, _ := proto.Marshal(&capnv1.BootstrapData{Format: "cloud-config", Data: data, Checksum: m.Header.Get(sdk.HeaderBootstrapChecksum)})
			r.Data, _ = replyseal.Seal(m.Header.Get(sdk.HeaderBootstrapCredential), m.Subject, b)
			return r
		},
		"refused": func(m *nats.Msg) *nats.Msg {
			r := nats.NewMsg(m.Reply)
			r.Header.Set(sdk.HeaderServiceErrorCode, "409")
			r.Header.Set(sdk.HeaderServiceError, "stale")
			return r
		},
		"later": func(m *nats.Msg) *nats.Msg {
			r := nats.NewMsg(m.Reply)
			r.Header.Set(sdk.HeaderServiceErrorCode, "404")
			r.Header.Set(sdk.HeaderServiceError, "no data yet")
			return r
		},
		"tampered": func(m *nats.Msg) *nats.Msg {
			r := nats.NewMsg(m.Reply)
			b, _ := proto.Marshal(&capnv1.BootstrapData{Format: "cloud-config", Data: []byte("#cloud-config\nevil\n"), Checksum: good})
			r.Data, _ = replyseal.Seal(m.Header.Get(sdk.HeaderBootstrapCredential), m.Subject, b)
			return r
		},
	}
	sub, err := nc.Subscribe(sdk.BootstrapFetchRoot+".c1.*", func(m *nats.Msg) {
		if m.Header.Get(sdk.HeaderBootstrapChecksum) == "" {
			return
		}
		toks := m.Subject[len(sdk.BootstrapFetchRoot+".c1."):]
		if f, ok := answers[toks]; ok {
			_ = m.RespondMsg(f(m))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	tests := []struct {
		machine, checksum string
		check             func(*capnv1.BootstrapData, error) bool
	}{
		{"ok", good, func(d *capnv1.BootstrapData, err error) bool {
			return err == nil && string(d.GetData()) == string(data) && d.GetFormat() == "cloud-config"
		}},
		{"ok", "sha256:00", func(_ *capnv1.BootstrapData, err error) bool { return errors.Is(err, sdk.ErrBadBootstrapData) }},
		{"tampered", good, func(_ *capnv1.BootstrapData, err error) bool { return errors.Is(err, sdk.ErrBadBootstrapData) }},
		{"refused", good, func(_ *capnv1.BootstrapData, err error) bool {
			var fe *sdk.FetchError
			return errors.As(err, &fe) && fe.Code == 409 && !fe.Retryable() && fe.Message == "stale"
		}},
		{"later", good, func(_ *capnv1.BootstrapData, err error) bool {
			var fe *sdk.FetchError
			return errors.As(err, &fe) && fe.Retryable()
		}},
		{"silent", good, func(_ *capnv1.BootstrapData, err error) bool {
			return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
		}},
		{"ok", "", func(_ *capnv1.BootstrapData, err error) bool { return err != nil }},
	}
	for _, tt := range tests {
		t.Run(tt.machine+"/"+tt.checksum, func(t *testing.T) {
			timeout := 5 * time.Second
			if tt.machine == "silent" {
				timeout = 300 * time.Millisecond
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			d, err := sdk.FetchBootstrap(ctx, nc, "c1", tt.machine, tt.checksum, "cred")
			if !tt.check(d, err) {
				t.Fatalf("FetchBootstrap = %v, %v", d, err)
			}
		})
	}
	if _, err := sdk.FetchBootstrap(context.Background(), nc, "c2", "m", good, "cred"); !errors.Is(err, nats.ErrNoResponders) {
		t.Errorf("no bootstrapper: err = %v, want no responders", err)
	}
}
