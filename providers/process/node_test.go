package process

import (
	"slices"
	"testing"
)

// A rendered deployment's node user needs its TLS files and inbox prefix
// on capn-node's command line, after the identity head.
func TestNodeArgsCarryTheNodeUsersNATSSettings(t *testing.T) {
	p := &Provider{opts: Options{NodeBinary: "/bin/capn-node", NodeNATSURL: "tls://127.0.0.1:4222", NodeNATSNKey: "/u/nats.nk",
		NodeNATSTLSCA: "/u/ca.pem", NodeNATSTLSCert: "/u/nats.pem", NodeNATSTLSKey: "/u/nats-key.pem", NodeNATSInboxPrefix: "_INBOX_node"}}
	rec := &machineRecord{Cluster: "c1", Machine: "m1", Version: "v1.33.4", Checksum: "sha256:00"}
	args := p.nodeArgs(rec)
	for _, want := range []string{"--nats-nkey=/u/nats.nk", "--nats-tls-ca=/u/ca.pem", "--nats-tls-cert=/u/nats.pem",
		"--nats-tls-key=/u/nats-key.pem", "--nats-inbox-prefix=_INBOX_node"} {
		if !slices.Contains(args, want) {
			t.Errorf("capn-node args lack %s: %v", want, args)
		}
	}
	if !slices.Equal(args[:len(p.identity(rec))], p.identity(rec)) {
		t.Errorf("the identity head changed: %v", args)
	}
	p.opts = Options{NodeBinary: "/bin/capn-node"}
	for _, a := range p.nodeArgs(rec) {
		if a == "--nats-inbox-prefix=" || a == "--nats-tls-ca=" {
			t.Errorf("an empty setting became a flag: %v", a)
		}
	}
}
