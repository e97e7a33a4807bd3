package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/capn-dev/capn/events/embedded"
)

// valueSize is the size of the values the baseline writes: about a
// machine status, the most written value in a fleet create.
const valueSize = 320

type baseline struct {
	KVPut1, KVPut4, JSPubAsync float64 // operations per second
}

// server starts a fresh embedded server with file storage in a temp dir.
func startServer() (*server.Server, func(), error) {
	dir, err := os.MkdirTemp("", "capn-bench-")
	if err != nil {
		return nil, nil, err
	}
	srv, err := embedded.Start(embedded.Options{StoreDir: dir, DontListen: true, ServerName: "capn-bench"})
	if err != nil {
		return nil, nil, err
	}
	return srv, func() { srv.Shutdown(); srv.WaitForShutdown(); _ = os.RemoveAll(dir) }, nil
}

func connect(srv *server.Server, name string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect("", nats.InProcessServer(srv), nats.Name(name))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	return nc, js, err
}

// measureBaseline measures, on its own fresh server, KV puts from one and
// from four in-process clients and async JetStream publishes.
func measureBaseline(ctx context.Context) (baseline, error) {
	srv, stop, err := startServer()
	if err != nil {
		return baseline{}, err
	}
	defer stop()
	var b baseline
	val := make([]byte, valueSize)
	put := func(clients, perClient int) (float64, error) {
		var kvs []jetstream.KeyValue
		for i := range clients {
			nc, js, err := connect(srv, fmt.Sprint("baseline-", i))
			if err != nil {
				return 0, err
			}
			defer nc.Close()
			kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "baseline", History: 1, Storage: jetstream.FileStorage})
			if err != nil {
				return 0, err
			}
			kvs = append(kvs, kv)
		}
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		start := time.Now()
		for i, kv := range kvs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range perClient {
					if _, err := kv.Put(ctx, fmt.Sprintf("k.%d.%d", i, j%5000), val); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return 0, err
		}
		return float64(clients*perClient) / time.Since(start).Seconds(), nil
	}
	if b.KVPut1, err = put(1, 20000); err != nil {
		return b, err
	}
	if b.KVPut4, err = put(4, 10000); err != nil {
		return b, err
	}
	nc, js, err := connect(srv, "baseline-pub")
	if err != nil {
		return b, err
	}
	defer nc.Close()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BASELINE", Subjects: []string{"baseline.>"}, Storage: jetstream.FileStorage}); err != nil {
		return b, err
	}
	const n = 100000
	start := time.Now()
	for i := range n {
		if _, err := js.PublishAsync(fmt.Sprint("baseline.", i%100), val); err != nil {
			return b, err
		}
		if i%2000 == 1999 { // stay under nats.go's 4,000 outstanding async publishes
			<-js.PublishAsyncComplete()
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return b, fmt.Errorf("baseline publishes not acknowledged within a minute")
	}
	b.JSPubAsync = n / time.Since(start).Seconds()
	return b, nil
}
