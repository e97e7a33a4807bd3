package process

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// Machine addresses are 127.<a>.<b>.<x>, x in [firstHost, lastHost]: the
// loopback network routes all of 127.0.0.0/8 to this host, so each machine
// gets an address of its own without any network setup. The /24 network
// <a>.<b> is the state dir's own (MachineNetwork: a hash of its absolute
// path, a never 0, so 127.0.0.1 and 127.0.1.1 stay the host's), so two
// process providers — two capn dev data dirs, tests running side by side —
// do not hand out the same addresses, and with them the same
// etcd/kube-apiserver ports. An address on which any program listens is
// skipped too (a hash collision, a leftover).
const (
	firstHost = 2
	lastHost  = 254
)

// MachineNetwork is the /24 network of 127.0.0.0/8 whose addresses the
// provider with stateDir gives its machines.
func MachineNetwork(stateDir string) netip.Prefix {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		abs = stateDir
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(abs))
	v := h.Sum32()
	a := byte(1 + v%254) // 1-254
	b := byte(v >> 8)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{127, a, b, 0}), 24)
}

// allocateAddress returns the lowest address of the state dir's network
// that no machine in the state dir holds and no program listens on.
// p.mu must be held.
func (p *Provider) allocateAddress() (string, error) {
	recs, err := p.records()
	if err != nil {
		return "", err
	}
	used := make(map[string]bool, len(recs))
	for _, r := range recs {
		used[r.Address] = true
	}
	listening := listeningAddresses()
	base := MachineNetwork(p.opts.StateDir).Addr().As4()
	for x := firstHost; x <= lastHost; x++ {
		base[3] = byte(x)
		a := netip.AddrFrom4(base)
		if !used[a.String()] && !listening[a] {
			return a.String(), nil
		}
	}
	return "", fmt.Errorf("process: all %d machine addresses of %s are taken", lastHost-firstHost+1, MachineNetwork(p.opts.StateDir))
}

// listeningAddresses are the IPv4 addresses with a listening TCP socket on
// this host (/proc/net/tcp; empty where there is none).
func listeningAddresses() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// sl local_address rem_address st ...; local is hex addr:port with
		// the address in host (little-endian) byte order.
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != "0A" { // 0A: LISTEN
			continue
		}
		hexAddr, _, ok := strings.Cut(fields[1], ":")
		b, err := hex.DecodeString(hexAddr)
		if !ok || err != nil || len(b) != 4 {
			continue
		}
		out[netip.AddrFrom4([4]byte{b[3], b[2], b[1], b[0]})] = true
	}
	return out
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
