package process

import (
	"fmt"
	"net"
	"strconv"
)

// Machine addresses are 127.0.0.<x>, x in [firstHost, lastHost]: the
// loopback network routes all of 127.0.0.0/8 to this host, so each machine
// gets an address of its own without any network setup. 127.0.0.1 is left
// to the host (and to the clusters' endpoints).
const (
	firstHost = 2
	lastHost  = 254
)

// allocateAddress returns the lowest address no machine in the state dir
// holds. Addresses are unique per state dir (one process provider per
// host). p.mu must be held.
func (p *Provider) allocateAddress() (string, error) {
	recs, err := p.records()
	if err != nil {
		return "", err
	}
	used := make(map[string]bool, len(recs))
	for _, r := range recs {
		used[r.Address] = true
	}
	for x := firstHost; x <= lastHost; x++ {
		a := "127.0.0." + strconv.Itoa(x)
		if !used[a] {
			return a, nil
		}
	}
	return "", fmt.Errorf("process: all %d machine addresses (127.0.0.%d-%d) are taken", lastHost-firstHost+1, firstHost, lastHost)
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
