// Package endpoint is capn-node's placeholder control-plane endpoint: the
// process (process provider) or container (docker provider) that holds a
// cluster's control-plane address until a later issue runs a real
// Kubernetes API server behind it. It serves plain HTTP: GET /healthz
// answers 200, and every other request 503 saying that no API server runs.
package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Serve serves the placeholder on ln until ctx ends; it closes ln.
func Serve(ctx context.Context, ln net.Listener, cluster string) error {
	srv := &http.Server{Handler: Handler(cluster), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Handler is the placeholder's HTTP handler.
func Handler(cluster string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "ok: placeholder control-plane endpoint of cluster %s\n", cluster)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, fmt.Sprintf("placeholder control-plane endpoint of cluster %s: no Kubernetes API server runs here yet", cluster),
			http.StatusServiceUnavailable)
	})
	return mux
}
