package token

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
)

func TestGenerate(t *testing.T) {
	seen := map[string]bool{}
	counts := map[rune]int{}
	for range 2000 {
		tok, err := Generate()
		if err != nil {
			t.Fatal(err)
		}
		if !format.MatchString(tok.Value()) {
			t.Fatalf("generated %q does not match the format", tok.Value())
		}
		if seen[tok.Value()] {
			t.Fatal("duplicate token")
		}
		seen[tok.Value()] = true
		for _, c := range tok.Secret {
			counts[c]++
		}
		back, err := Parse(tok.Value())
		if err != nil || back != tok {
			t.Fatalf("Parse(Value()) = %v, %v", back, err)
		}
	}
	if len(counts) != len(alphabet) {
		t.Fatalf("only %d of %d characters used", len(counts), len(alphabet))
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in string
		ok bool
	}{
		{"abcdef.0123456789abcdef", true},
		{"ABCDEF.0123456789abcdef", false},
		{"abcde.0123456789abcdef", false},
		{"abcdef.0123456789abcde", false},
		{"abcdef0123456789abcdef", false},
		{"abcdef.0123456789abcdef\n", false},
		{"abc-ef.0123456789abcdef", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.in), func(t *testing.T) {
			_, err := Parse(tt.in)
			if (err == nil) != tt.ok {
				t.Fatalf("Parse error = %v, want ok=%v", err, tt.ok)
			}
			if err != nil {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("error %v is not ErrFormat", err)
				}
				if len(tt.in) > 6 && strings.Contains(err.Error(), tt.in[7:]) {
					t.Fatal("error repeats the token")
				}
			}
		})
	}
}

func TestStringRedacts(t *testing.T) {
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	for _, s := range []string{tok.String(), fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s %q", tok, tok, tok, tok, tok)} {
		if strings.Contains(s, tok.Secret) {
			t.Fatalf("%q leaks the secret", s)
		}
		if !strings.Contains(s, "abcdef") {
			t.Fatalf("%q lost the id", s)
		}
	}
}

func TestTTL(t *testing.T) {
	tests := []struct {
		name string
		in   *durationpb.Duration
		want time.Duration
		err  string
	}{
		{"unset", nil, DefaultTTL, ""},
		{"zero", durationpb.New(0), DefaultTTL, ""},
		{"30m", durationpb.New(30 * time.Minute), 30 * time.Minute, ""},
		{"too short", durationpb.New(30 * time.Second), 0, "token TTL 30s: want between 1m0s and 168h0m0s"},
		{"negative", durationpb.New(-time.Hour), 0, "want between"},
		{"too long", durationpb.New(8 * 24 * time.Hour), 0, "want between"},
		{"malformed", &durationpb.Duration{Seconds: 1, Nanos: -1}, 0, "token TTL:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TTL(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("TTL error = %v, want containing %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("TTL = %s, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestNeedsRenewal(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	exp := Expiry(now, DefaultTTL)
	tests := []struct {
		name      string
		at        time.Time
		want      bool
		wantAfter time.Duration
	}{
		{"just made", now, false, 10 * time.Minute},
		{"9m in", now.Add(9 * time.Minute), false, time.Minute},
		{"10m in: exactly a third left", now.Add(10 * time.Minute), false, 0},
		{"11m in", now.Add(11 * time.Minute), true, 0},
		{"expired", now.Add(time.Hour), true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NeedsRenewal(exp, DefaultTTL, tt.at); got != tt.want {
				t.Fatalf("NeedsRenewal = %v, want %v", got, tt.want)
			}
			if got := RenewAfter(exp, DefaultTTL, tt.at); got != tt.wantAfter {
				t.Fatalf("RenewAfter = %s, want %s", got, tt.wantAfter)
			}
		})
	}
}

func TestSecretData(t *testing.T) {
	tok := Token{ID: "abcdef", Secret: "0123456789abcdef"}
	d := SecretData(tok, time.Date(2026, 1, 1, 0, 15, 0, 0, time.UTC), "capn join m1")
	if SecretName(tok) != "bootstrap-token-abcdef" || d["token-secret"] != tok.Secret || d["expiration"] != "2026-01-01T00:15:00Z" || d["auth-extra-groups"] != NodeGroup {
		t.Fatalf("secret data %v", d)
	}
}
