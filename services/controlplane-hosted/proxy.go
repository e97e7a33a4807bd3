package controlplanehosted

import (
	"io"
	"net"
	"sync"
	"time"
)

// proxy is a hosted control plane's endpoint: a TCP listener that passes
// each connection (TLS end to end: the API servers' certificates name the
// loopback address) to an API server that answered /readyz last, in
// order, falling back to any when none did. One API server's restart (a
// kill, an upgrade) leaves the endpoint up.
type proxy struct {
	ln       net.Listener
	backends func() []string // ready first
	wg       sync.WaitGroup
}

func startProxy(addr string, backends func() []string) (*proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, backends: backends}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pass(c)
	}
}

func (p *proxy) pass(c net.Conn) {
	defer c.Close()
	var b net.Conn
	for _, addr := range p.backends() {
		var err error
		if b, err = net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
			break
		}
	}
	if b == nil {
		return
	}
	defer b.Close()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(b, c)
	go cp(c, b)
	<-done
	<-done
}

// Close stops accepting; connections under way end with their peers.
func (p *proxy) Close() {
	_ = p.ln.Close()
	p.wg.Wait()
}
