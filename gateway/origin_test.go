package gateway

import "testing"

func TestHostPolicy(t *testing.T) {
	tests := []struct {
		name   string
		listen string
		names  []string
		host   string
		want   bool
	}{
		{"loopback: its address", "127.0.0.1:8080", nil, "127.0.0.1:8080", true},
		{"loopback: localhost", "127.0.0.1:8080", nil, "localhost:8080", true},
		{"loopback: IPv6 loopback", "127.0.0.1:8080", nil, "[::1]:8080", true},
		{"loopback: a rebound name", "127.0.0.1:8080", nil, "evil.example:8080", false},
		{"loopback: a single label", "127.0.0.1:8080", nil, "intranet:8080", false},
		{"loopback: another IP", "127.0.0.1:8080", nil, "10.0.0.1:8080", false},
		{"loopback: no Host", "127.0.0.1:8080", nil, "", false},
		{"loopback: a configured name", "127.0.0.1:8080", []string{"capn.example.com"}, "CAPN.example.com", true},
		{"any name", "127.0.0.1:8080", []string{"*"}, "evil.example", true},
		{"wildcard: an IP", "0.0.0.0:8080", nil, "192.0.2.7:8080", true},
		{"wildcard: a container name", "[::]:8080", nil, "gateway:8080", true},
		{"wildcard: localhost", ":8080", nil, "localhost:8080", true},
		{"wildcard: a dotted name", "0.0.0.0:8080", nil, "evil.example", false},
		{"wildcard: a configured name", "0.0.0.0:8080", []string{" capn.example.com:443 "}, "capn.example.com", true},
		{"one IP: itself", "192.0.2.7:8080", nil, "192.0.2.7", true},
		{"one IP: loopback", "192.0.2.7:8080", nil, "127.0.0.1:8080", false},
		{"a named listen address", "capn.internal:8080", nil, "capn.internal:8080", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := newHostPolicy(tt.listen, tt.names).allows(tt.host); got != tt.want {
				t.Errorf("listen %s names %v: allows(%q) = %v, want %v", tt.listen, tt.names, tt.host, got, tt.want)
			}
		})
	}
}
