package bootstrapper

import (
	"testing"
	"time"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/secrets/pki"
)

func TestPKIChecks(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	stored := &capnv1.ClusterPKI{Ca: &capnv1.KeyPairPEM{CertPem: "cert", KeyPem: "key"}}
	other := &capnv1.ClusterPKI{Ca: &capnv1.KeyPairPEM{CertPem: "cert2", KeyPem: "key"}}
	user := &pki.KeyPair{CertPEM: []byte("cert"), KeyPEM: []byte("key")}
	d := pkiDigest(stored, nil)
	if d == pkiDigest(other, nil) || d == pkiDigest(stored, user) {
		t.Fatal("different stored PKIs or user CAs share a digest")
	}
	if d != pkiDigest(stored, nil) {
		t.Fatal("the same PKI has two digests")
	}

	var c pkiChecks
	if _, ok := c.get("c1", d, now); ok {
		t.Fatal("hit on an empty memo")
	}
	want := clusterPKI{user: true}
	c.put("c1", d, want, now)
	for _, tt := range []struct {
		name    string
		cluster string
		digest  [32]byte
		at      time.Time
		hit     bool
	}{
		{"same bytes, within a minute", "c1", d, now.Add(59 * time.Second), true},
		{"same bytes, a minute later: checked again", "c1", d, now.Add(time.Minute), false},
		{"clock went back", "c1", d, now.Add(-time.Second), false},
		{"other bytes", "c1", pkiDigest(other, nil), now, false},
		{"other cluster", "c2", d, now, false},
	} {
		got, ok := c.get(tt.cluster, tt.digest, tt.at)
		if ok != tt.hit || (ok && got.user != want.user) {
			t.Errorf("%s: get = %v, %v; want hit %v", tt.name, got, ok, tt.hit)
		}
	}
	c.forget("c1")
	if _, ok := c.get("c1", d, now); ok {
		t.Error("hit after forget")
	}
}

func TestPKIChecksAtRevision(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	stored := &capnv1.ClusterPKI{Ca: &capnv1.KeyPairPEM{CertPem: "cert", KeyPem: "key"}}
	user := &pki.KeyPair{CertPEM: []byte("cert"), KeyPEM: []byte("key")}
	none, theirs := pkiDigest(nil, nil), pkiDigest(nil, user)
	d := pkiDigest(stored, nil)

	var c pkiChecks
	c.put("c1", d, clusterPKI{}, now)
	if _, ok := c.atRevision("c1", 7, none, now); ok {
		t.Fatal("hit before the revision is known")
	}
	c.readAt("c1", pkiDigest(stored, user), 7, theirs) // other bytes: not this entry's revision
	if _, ok := c.atRevision("c1", 7, theirs, now); ok {
		t.Fatal("a revision recorded for other bytes was taken")
	}
	c.readAt("c1", d, 7, none)
	for _, tt := range []struct {
		name string
		rev  uint64
		user [32]byte
		at   time.Time
		hit  bool
	}{
		{"same revision, within a minute", 7, none, now.Add(59 * time.Second), true},
		{"same revision, a minute later: checked again", 7, none, now.Add(time.Minute), false},
		{"another revision", 8, none, now, false},
		{"revision 0", 0, none, now, false},
		{"a user CA now", 7, theirs, now, false},
	} {
		if _, ok := c.atRevision("c1", tt.rev, tt.user, tt.at); ok != tt.hit {
			t.Errorf("%s: hit %v, want %v", tt.name, ok, tt.hit)
		}
	}
	c.put("c1", d, clusterPKI{}, now) // checked again: its revision is to be read again
	if _, ok := c.atRevision("c1", 7, none, now); ok {
		t.Error("hit on a revision recorded before the entry was replaced")
	}
}
