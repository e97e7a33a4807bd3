package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/tests/internal/harness"
)

// chaosHeader marks a message the proxy published, so that it never
// copies its own copies.
const chaosHeader = "Capn-Chaos"

// proxy sees every command and event the services publish (a plain NATS
// subscription next to the streams) and injects faults with the very same
// CloudEvents (ce-id, every header, the data):
//   - duplicate: published again at once with the same Nats-Msg-Id (the
//     streams' duplicate window must drop it);
//   - delayed: published again 0.2–3s later with a fresh Nats-Msg-Id, so
//     that it is stored and delivered a second time, as a redelivery or a
//     publish retried after the window would be;
//   - reordered: held and published again in reverse order with other held
//     messages every 500ms (fresh Nats-Msg-Id).
//
// It also records every provider machine command, for replay.
type proxy struct {
	t    *testing.T
	sys  *harness.System
	subs []*nats.Subscription
	rate float64

	mu       sync.Mutex
	rng      *rand.Rand
	held     []*nats.Msg
	recorded []*nats.Msg // provider machine commands, in order

	seen, dupStored, dupDropped, delayed, reordered, failed atomic.Int64
	n                                                       atomic.Int64
	stopped                                                 atomic.Bool
	wg                                                      sync.WaitGroup
	done                                                    chan struct{}
}

var proxySubjects = []string{"capn.provider.sim.>", "capn.cmd.>", "capn.evt.>"}

func startProxy(t *testing.T, sys *harness.System, seed uint64, rate float64) *proxy {
	p := &proxy{t: t, sys: sys, rate: rate, rng: rand.New(rand.NewPCG(seed, 7)), done: make(chan struct{})}
	for _, s := range proxySubjects {
		sub, err := sys.NC.Subscribe(s, p.on)
		if err != nil {
			t.Fatal(err)
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			t.Fatal(err)
		}
		p.subs = append(p.subs, sub)
	}
	if err := sys.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	p.wg.Add(1)
	go p.flushHeld()
	t.Cleanup(p.stop)
	return p
}

// copyOf is m as the proxy republishes it: same subject, headers and data,
// marked as the proxy's, with msgID as its Nats-Msg-Id ("" keeps it).
func (p *proxy) copyOf(m *nats.Msg, msgID string) *nats.Msg {
	c := nats.NewMsg(m.Subject)
	for k, v := range m.Header {
		c.Header[k] = append([]string(nil), v...)
	}
	c.Data = append([]byte(nil), m.Data...)
	c.Header.Set(chaosHeader, "1")
	if msgID != "" {
		c.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	return c
}

func (p *proxy) freshID(m *nats.Msg) string {
	return fmt.Sprintf("%s.chaos-%d", m.Header.Get(jetstream.MsgIDHeader), p.n.Add(1))
}

func (p *proxy) on(m *nats.Msg) {
	if m.Header.Get(chaosHeader) != "" || m.Header.Get(jetstream.MsgIDHeader) == "" || p.stopped.Load() {
		return
	}
	p.seen.Add(1)
	p.mu.Lock()
	if strings.HasPrefix(m.Subject, "capn.provider.sim.machine.") {
		p.recorded = append(p.recorded, p.copyOf(m, ""))
	}
	roll := p.rng.Float64()
	which := p.rng.IntN(3)
	delay := 200*time.Millisecond + time.Duration(p.rng.Int64N(int64(2800*time.Millisecond)))
	p.mu.Unlock()
	if roll >= p.rate {
		return
	}
	switch which {
	case 0:
		c := p.copyOf(m, "")
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ack, ok := p.publish(c)
			switch {
			case !ok:
			case ack.Duplicate:
				p.dupDropped.Add(1)
			default:
				p.dupStored.Add(1)
			}
		}()
	case 1:
		c := p.copyOf(m, p.freshID(m))
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			select {
			case <-time.After(delay):
			case <-p.done:
				return
			}
			if _, ok := p.publish(c); ok {
				p.delayed.Add(1)
			}
		}()
	default:
		p.mu.Lock()
		p.held = append(p.held, p.copyOf(m, p.freshID(m)))
		p.mu.Unlock()
	}
}

// flushHeld publishes the held messages, last first, every 500ms.
func (p *proxy) flushHeld() {
	defer p.wg.Done()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-tick.C:
		}
		p.mu.Lock()
		held := p.held
		p.held = nil
		p.mu.Unlock()
		for i := len(held) - 1; i >= 0; i-- {
			if _, ok := p.publish(held[i]); ok {
				p.reordered.Add(1)
			}
		}
	}
}

// publish stores c in its stream; a failure (the server restarting) is
// counted, not fatal: that copy is simply lost, like any in flight.
func (p *proxy) publish(c *nats.Msg) (*jetstream.PubAck, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ack, err := p.sys.JS.PublishMsg(ctx, c)
	if err != nil {
		p.failed.Add(1)
		return nil, false
	}
	return ack, true
}

// stop ends the injection and waits for the copies in flight.
func (p *proxy) stop() {
	if p.stopped.Swap(true) {
		return
	}
	for _, s := range p.subs {
		_ = s.Unsubscribe()
	}
	close(p.done)
	p.wg.Wait()
}

// replayCommands publishes every recorded provider machine command for
// which keep(verb, cluster, machine) holds again, in its original order, with
// fresh Nats-Msg-Ids: a replay of the provider command stream.
func (p *proxy) replayCommands(keep func(verb, cluster, machine string) bool) int {
	p.mu.Lock()
	rec := append([]*nats.Msg(nil), p.recorded...)
	p.mu.Unlock()
	n := 0
	for _, m := range rec {
		// capn.provider.sim.machine.<verb>.<cluster>.<machine>
		toks := strings.Split(m.Subject, ".")
		if len(toks) != 7 || !keep(toks[4], toks[5], toks[6]) {
			continue
		}
		if _, ok := p.publish(p.copyOf(m, p.freshID(m))); ok {
			n++
		}
	}
	return n
}

func (p *proxy) String() string {
	return fmt.Sprintf("%d messages seen; same-id duplicates %d dropped by JetStream, %d stored; %d delayed and %d reordered copies delivered; %d copies lost to restarts",
		p.seen.Load(), p.dupDropped.Load(), p.dupStored.Load(), p.delayed.Load(), p.reordered.Load(), p.failed.Load())
}

// replayEvents republishes the events stream's messages from seq first to
// last (inclusive), in order, with fresh Nats-Msg-Ids: a replay of a range
// of the stream.
func replayEvents(t *testing.T, sys *harness.System, first, last uint64) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := sys.JS.Stream(ctx, "CAPN_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for seq := first; seq <= last; seq++ {
		raw, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted or never stored
		}
		c := nats.NewMsg(raw.Subject)
		for k, v := range raw.Header {
			c.Header[k] = v
		}
		c.Data = raw.Data
		c.Header.Set(chaosHeader, "1")
		c.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s.replay-%d", raw.Header.Get(jetstream.MsgIDHeader), seq))
		if _, err := sys.JS.PublishMsg(ctx, c); err != nil {
			t.Fatalf("replay event %d: %v", seq, err)
		}
		n++
	}
	return n
}

// lastSeq is a stream's last sequence number.
func lastSeq(t *testing.T, sys *harness.System, stream string) uint64 {
	t.Helper()
	s, err := sys.JS.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}
