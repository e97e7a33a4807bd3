package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/api"
)

// ingestRun is one ingest measurement: CloudEvents per second through the
// gateway's POST /v1/events, and JetStream's publish rates on the same
// server with the same payload, measured just before.
type ingestRun struct {
	Clients               int
	Batch                 int     // events per request in batch mode
	Single, Batched       float64 // events/s through the gateway
	JSPubSync, JSPubAsync float64 // events/s straight into JetStream
}

// ingestPayload is an event's data: about a node-problem-detector
// condition's size.
var ingestPayload = []byte(`{"cluster":"fleet-0001","machine":"fleet-0001-md-0-7f9c2-3","reason":"KernelOops","message":"kernel: BUG: unable to handle kernel NULL pointer dereference at 0000000000000000"}`)

const ingestToken = "bench-ingest-token-0123456789abcdef"

// measureIngest runs the gateway on a fresh server and, for d each, posts
// single events in binary mode and batches of `batch` structured events
// from `clients` concurrent HTTP clients. Events carry a generic type, so
// they are stored on CAPN_INGEST and routed nowhere else.
func measureIngest(ctx context.Context, clients, batch int, d time.Duration) (ingestRun, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return ingestRun{}, err
	}
	topo := events.DefaultTopology(1)
	topo.Streams = append(topo.Streams, gateway.Topology(1).Streams...)
	e, err := startEnv(ctx, topo, gateway.New(gateway.Options{
		Listener:  ln,
		Tokens:    []gateway.Token{{Name: "bench", Secret: ingestToken, Scopes: []api.Scope{api.ScopeIngest}}},
		RateLimit: -1,
	}))
	if err != nil {
		return ingestRun{}, err
	}
	defer e.Close()
	r := ingestRun{Clients: clients, Batch: batch}
	if r.JSPubSync, r.JSPubAsync, err = jsPublishRates(ctx, e.js, clients, d); err != nil {
		return r, err
	}
	url := "http://" + ln.Addr().String() + "/v1/events"
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 30 * time.Second}
	var seq atomic.Int64
	single := func() (int, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(ingestPayload))
		req.Header.Set("Authorization", "Bearer "+ingestToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("ce-specversion", "1.0")
		req.Header.Set("ce-id", fmt.Sprint("s-", seq.Add(1)))
		req.Header.Set("ce-source", "bench/ingest")
		req.Header.Set("ce-type", "com.example.bench.problem")
		return 1, post(hc, req)
	}
	batched := func() (int, error) {
		evs := make([]map[string]any, batch)
		for i := range evs {
			evs[i] = map[string]any{"specversion": "1.0", "id": fmt.Sprint("b-", seq.Add(1)), "source": "bench/ingest",
				"type": "com.example.bench.problem", "datacontenttype": "application/json", "data": json.RawMessage(ingestPayload)}
		}
		body, _ := json.Marshal(evs)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+ingestToken)
		req.Header.Set("Content-Type", "application/cloudevents-batch+json")
		return batch, post(hc, req)
	}
	if r.Single, err = hammer(clients, d, single); err != nil {
		return r, fmt.Errorf("single events: %w", err)
	}
	if r.Batched, err = hammer(clients, d, batched); err != nil {
		return r, fmt.Errorf("batches: %w", err)
	}
	return r, nil
}

// post sends req and wants 202 Accepted.
func post(hc *http.Client, req *http.Request) error {
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusAccepted {
		return fmt.Errorf("%s: %s", res.Status, b)
	}
	return nil
}

// hammer calls do from `clients` goroutines for d and returns the events
// per second they got accepted.
func hammer(clients int, d time.Duration, do func() (int, error)) (float64, error) {
	var n atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	start := time.Now()
	stop := start.Add(d)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				k, err := do()
				if err != nil {
					errs <- err
					return
				}
				n.Add(int64(k))
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

// jsPublishRates publishes the same payload onto the ingest stream straight
// through JetStream: acknowledged one by one from `clients` goroutines (what
// the gateway does per request), and asynchronously from one.
func jsPublishRates(ctx context.Context, js jetstream.JetStream, clients int, d time.Duration) (sync, async float64, err error) {
	var seq atomic.Int64
	subject := "capn.ingest.bench.baseline"
	if sync, err = hammer(clients, d, func() (int, error) {
		_, err := js.Publish(ctx, subject, ingestPayload, jetstream.WithMsgID(fmt.Sprint("js-", seq.Add(1))))
		return 1, err
	}); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		if _, err := js.PublishAsync(subject, ingestPayload, jetstream.WithMsgID(fmt.Sprint("jsa-", seq.Add(1)))); err != nil {
			return 0, 0, err
		}
		n++
		if n%2000 == 0 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	return sync, float64(n) / time.Since(start).Seconds(), nil
}
