package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events/natstest"
)

// TestHeaderSizeIsWhatJetStreamCounts: the check's header size is the
// server's, to the byte: a header of exactly maxStoredHeader bytes is
// stored, one byte more is refused — by the real server.
func TestHeaderSizeIsWhatJetStreamCounts(t *testing.T) {
	ns := natstest.Start(t)
	nc, js := ns.Connect(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HDR", Subjects: []string{"hdr.>"}}); err != nil {
		t.Fatal(err)
	}
	lim := publishLimitsOf(nc)
	msg := func(size int) *nats.Msg {
		m := &nats.Msg{Subject: "hdr.x", Header: nats.Header{"X-Pad": {""}}, Data: []byte("{}")}
		m.Header.Set("X-Pad", strings.Repeat("p", size-headerSize(m.Header)))
		if got := headerSize(m.Header); got != size {
			t.Fatalf("headerSize %d, want %d", got, size)
		}
		return m
	}
	for _, tt := range []struct {
		size int
		ok   bool
	}{{maxStoredHeader, true}, {maxStoredHeader + 1, false}} {
		m := msg(tt.size)
		_, err := js.PublishMsg(ctx, m)
		why := lim.check("HDR", m)
		if (err == nil) != tt.ok || (why == "") != tt.ok {
			t.Errorf("header of %d bytes: JetStream says %v, the check %q; want stored: %v", tt.size, err, why, tt.ok)
		}
	}
	big := &nats.Msg{Subject: "hdr.x", Header: nats.Header{}, Data: make([]byte, nc.MaxPayload())}
	if why := lim.check("HDR", big); !strings.Contains(why, "max_payload") {
		t.Errorf("a message over max_payload: %q", why)
	}
	lim.maxMsgSize["HDR"] = 100
	if why := lim.check("HDR", msg(200)); !strings.Contains(why, "stream HDR") {
		t.Errorf("a message over the stream's max_msg_size: %q", why)
	}
}
