package pki

import "testing"

// BenchmarkEnsure is the cost of a new cluster's PKI plus its admin
// certificate: five ECDSA P-256 keys and four certificates.
func BenchmarkEnsure(b *testing.B) {
	for b.Loop() {
		s, _, err := Ensure(Set{}, Options{Now: now})
		if err != nil {
			b.Fatal(err)
		}
		ca, err := ParseCA(s.CA, now)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := IssueAdmin(ca, now); err != nil {
			b.Fatal(err)
		}
	}
}
