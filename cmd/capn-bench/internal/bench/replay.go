package bench

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
)

// The replay answers "how fast could NATS go doing what capn asks of it?":
// it stores the same messages a fleet create stored, on a fresh server,
// with the same consumers and KV watchers taking every delivery, but with
// no service doing any work between them — each write published as soon
// as the previous one of its client is stored, from replayClients clients,
// as the KV-put baseline does. Its write rate is about the most a design
// making the same writes to the same readers gets from this server,
// published that way (more publishing clients gain little: 14.1k writes/s
// with 4 and 17.8k with 64 at 100 clusters, docs/benchmarks.md).
var replayClients = 4

// tapped is one message a service published during a fleet create, as a
// core subscription saw it.
type tapped struct {
	subject string
	header  nats.Header
	data    []byte
}

// watchSpec is a KV watcher that was open during the create: its bucket
// and the keys it was filtered to (none: every key).
type watchSpec struct {
	bucket string
	keys   []string
}

// durableSpec is a durable consumer that was open during the create.
type durableSpec struct {
	stream string
	config jetstream.ConsumerConfig
}

// traffic is what a fleet create asked of NATS: the messages published,
// in order, and who read them.
type traffic struct {
	msgs     []tapped
	watches  []watchSpec
	durables []durableSpec
}

// replayRun is one replay of a fleet create's traffic.
type replayRun struct {
	Elapsed        time.Duration
	KVWrites       uint64  // messages the KV streams stored
	Messages       uint64  // messages capn's other streams stored
	Watches        int     // KV watchers taking deliveries
	Durables       int     // durable consumers acking deliveries
	Published      int     // messages published (rejected compare-and-sets included)
	WatchDelivered uint64  // deliveries the watchers took
	CPU            float64 // the process's CPU time, in seconds
}

func (r replayRun) KVWriteRate() float64 { return float64(r.KVWrites) / r.Elapsed.Seconds() }

// readers lists the KV watchers (ephemeral consumers on a KV stream) and
// durable consumers open on js's server.
func readers(ctx context.Context, js jetstream.JetStream) ([]watchSpec, []durableSpec, error) {
	var ws []watchSpec
	var ds []durableSpec
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, nil, err
		}
		infos := s.ListConsumers(ctx)
		for ci := range infos.Info() {
			cfg := ci.Config
			if cfg.Durable != "" {
				ds = append(ds, durableSpec{stream: name, config: cfg})
				continue
			}
			bucket, ok := strings.CutPrefix(name, "KV_")
			if !ok {
				continue // an ordered consumer on an event stream: not opened by a fleet create's services
			}
			filters := cfg.FilterSubjects
			if cfg.FilterSubject != "" {
				filters = append(filters, cfg.FilterSubject)
			}
			w := watchSpec{bucket: bucket}
			for _, f := range filters {
				k := strings.TrimPrefix(f, "$KV."+bucket+".")
				if k != ">" {
					w.keys = append(w.keys, k)
				}
			}
			if len(filters) > 0 && len(w.keys) < len(filters) {
				w.keys = nil // one of the filters is the whole bucket
			}
			ws = append(ws, w)
		}
		if err := infos.Err(); err != nil {
			return nil, nil, err
		}
	}
	return ws, ds, names.Err()
}

// tap records every message published on capn's subjects and KV buckets,
// in the order the server delivered them, until stopped.
type tap struct {
	mu   sync.Mutex
	msgs []tapped
	subs []*nats.Subscription
}

func startTap(nc *nats.Conn) (*tap, error) {
	t := &tap{}
	for _, subj := range []string{"$KV.>", "capn.>"} {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			t.mu.Lock()
			t.msgs = append(t.msgs, tapped{subject: m.Subject, header: m.Header, data: m.Data})
			t.mu.Unlock()
		})
		if err != nil {
			t.stop()
			return nil, err
		}
		if err := sub.SetPendingLimits(-1, -1); err != nil {
			t.stop()
			return nil, err
		}
		t.subs = append(t.subs, sub)
	}
	return t, nil
}

func (t *tap) stop() []tapped {
	for _, s := range t.subs {
		_ = s.Unsubscribe()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.msgs
}

// measureReplay stores tr's messages on a fresh server with capn's
// topology and tr's readers.
func measureReplay(ctx context.Context, tr traffic) (replayRun, error) {
	srv, stop, err := startServer()
	if err != nil {
		return replayRun{}, err
	}
	defer stop()
	nc, js, err := connect(srv, "replay")
	if err != nil {
		return replayRun{}, err
	}
	defer nc.Close()
	if err := events.Provision(ctx, js, events.DefaultTopology(1)); err != nil {
		return replayRun{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := replayRun{Watches: len(tr.watches), Durables: len(tr.durables), Published: len(tr.msgs)}

	// The readers, each on its own connection as each service has one.
	var delivered sync.WaitGroup
	var deliveries atomic.Uint64
	var lastDelivery atomic.Int64 // unix nanoseconds
	for i, w := range tr.watches {
		wnc, wjs, err := connect(srv, fmt.Sprint("replay-watch-", i))
		if err != nil {
			return r, err
		}
		defer wnc.Close()
		kv, err := wjs.KeyValue(ctx, w.bucket)
		if err != nil {
			return r, err
		}
		kw, err := kv.WatchFiltered(rctx, append([]string(nil), w.keys...), jetstream.UpdatesOnly())
		if err != nil {
			return r, err
		}
		delivered.Add(1)
		go func() {
			defer delivered.Done()
			for {
				select {
				case e, ok := <-kw.Updates():
					if !ok {
						return
					}
					if e != nil {
						deliveries.Add(1)
						lastDelivery.Store(time.Now().UnixNano())
					}
				case <-rctx.Done():
					_ = kw.Stop()
					return
				}
			}
		}()
	}
	for i, d := range tr.durables {
		dnc, djs, err := connect(srv, fmt.Sprint("replay-durable-", i))
		if err != nil {
			return r, err
		}
		defer dnc.Close()
		c, err := djs.CreateOrUpdateConsumer(ctx, d.stream, d.config)
		if err != nil {
			return r, fmt.Errorf("durable %s on %s: %w", d.config.Durable, d.stream, err)
		}
		cc, err := c.Consume(func(m jetstream.Msg) { _ = m.Ack() })
		if err != nil {
			return r, err
		}
		defer cc.Stop()
	}
	tapNC, _, err := connect(srv, "replay-tap") // the fleet create had its tap too
	if err != nil {
		return r, err
	}
	defer tapNC.Close()
	tp, err := startTap(tapNC)
	if err != nil {
		return r, err
	}
	defer tp.stop()
	before, err := streamMessages(ctx, js)
	if err != nil {
		return r, err
	}

	// The writers: one shard of the messages each, by subject, so each
	// key's writes stay in order. Expected-revision headers are dropped:
	// a compare-and-set capn lost is stored here as a put.
	shards := make([][]tapped, replayClients)
	for _, m := range tr.msgs {
		h := fnv.New32a()
		_, _ = h.Write([]byte(m.subject))
		i := int(h.Sum32() % uint32(replayClients))
		shards[i] = append(shards[i], m)
	}
	var pubs []jetstream.JetStream
	for i := range replayClients {
		pnc, pjs, err := connect(srv, fmt.Sprint("replay-pub-", i))
		if err != nil {
			return r, err
		}
		defer pnc.Close()
		pubs = append(pubs, pjs)
	}
	errs := make(chan error, replayClients)
	var wg sync.WaitGroup
	cpu0, err := cpuSeconds(os.Getpid())
	if err != nil {
		return r, err
	}
	start := time.Now()
	for i, shard := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, m := range shard {
				msg := &nats.Msg{Subject: m.subject, Data: m.data, Header: nats.Header{}}
				for k, v := range m.header {
					if !strings.HasPrefix(k, "Nats-Expected-") {
						msg.Header[k] = v
					}
				}
				if _, err := pubs[i].PublishMsg(ctx, msg); err != nil {
					errs <- fmt.Errorf("replay %s: %w", m.subject, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	stored := time.Now()
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	// The clock stops once the watchers have taken their last delivery
	// (none for 200ms), or at the last store if they already had.
	quiet := time.NewTicker(200 * time.Millisecond)
	for n := deliveries.Load(); ctx.Err() == nil; {
		select {
		case <-ctx.Done():
		case <-quiet.C:
		}
		m := deliveries.Load()
		if m == n || time.Since(stored) > time.Minute {
			break
		}
		n = m
	}
	quiet.Stop()
	end := stored
	if t := time.Unix(0, lastDelivery.Load()); t.After(end) {
		end = t
	}
	r.Elapsed = end.Sub(start)
	cpu1, err := cpuSeconds(os.Getpid())
	if err != nil {
		return r, err
	}
	r.CPU = cpu1 - cpu0 // to the end of the wait for deliveries: a little more than the replay used
	r.WatchDelivered = deliveries.Load()
	after, err := streamMessages(ctx, js)
	if err != nil {
		return r, err
	}
	for name, v := range after {
		if strings.HasPrefix(name, "KV_") {
			r.KVWrites += v - before[name]
		} else {
			r.Messages += v - before[name]
		}
	}
	cancel()
	delivered.Wait()
	return r, nil
}
