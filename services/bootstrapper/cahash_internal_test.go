package bootstrapper

import (
	"testing"
	"time"

	"github.com/capn-dev/capn/secrets/pki"
)

func TestCAHashMemo(t *testing.T) {
	var certs [][]byte
	for range 2 {
		set, _, err := pki.Ensure(pki.Set{}, pki.Options{Now: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, set.CA.CertPEM)
	}
	var m caHashMemo
	for range 2 { // cold, then remembered
		for _, c := range certs {
			want, _ := pki.CACertHash(c)
			if got, err := m.hash(c); err != nil || got != want {
				t.Fatalf("hash = %q, %v; want %q", got, err, want)
			}
		}
	}
	if _, err := m.hash([]byte("not a certificate")); err == nil {
		t.Fatal("no error for a broken certificate")
	}
	m.by = make(map[string]string, caHashMemoSize)
	for i := range caHashMemoSize {
		m.by[string(rune(i))] = "x"
	}
	want, _ := pki.CACertHash(certs[0])
	if got, _ := m.hash(certs[0]); got != want || len(m.by) != 1 {
		t.Fatalf("a full memo: hash %q, %d entries; want it emptied first", got, len(m.by))
	}
}
