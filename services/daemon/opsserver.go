package daemon

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"
)

// OpsServer is an HTTP server for an OpsHandler.
type OpsServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// ListenOps listens on addr for the ops endpoints. The error of an address
// in use names the address and the flag and variable that change it.
func ListenOps(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s for /healthz /readyz /metrics (change it with --http-addr or CAPN_HTTP_ADDR): %w", addr, err)
	}
	return ln, nil
}

// ServeOps serves h on ln until Shutdown; the server owns ln then.
func ServeOps(ln net.Listener, h http.Handler, log zerolog.Logger) *OpsServer {
	l := log.With().Str("component", "ops_http").Logger()
	s := &OpsServer{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			ErrorLog:          stdlog.New(l, "", 0),
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			l.Error().Err(err).Msg("ops HTTP server failed")
		}
	}()
	return s
}

// Addr is the address the server listens on.
func (s *OpsServer) Addr() net.Addr { return s.ln.Addr() }

// URL is the server's base URL, with 127.0.0.1 for an address that
// listens on every interface.
func (s *OpsServer) URL() string {
	a, ok := s.ln.Addr().(*net.TCPAddr)
	if !ok {
		return "http://" + s.ln.Addr().String()
	}
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(a.Port))
}

// Shutdown stops accepting, waits for requests in flight until ctx ends,
// then closes what is left.
func (s *OpsServer) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	<-s.done
	return err
}
