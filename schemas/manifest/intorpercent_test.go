package manifest

import "testing"

func TestResolveIntOrPercent(t *testing.T) {
	tests := []struct {
		in      string
		total   int
		roundUp bool
		want    int
		wantErr bool
	}{
		{"1", 10, true, 1, false},
		{"0", 10, false, 0, false},
		{"25%", 10, true, 3, false},
		{"25%", 10, false, 2, false},
		{"10%", 3, true, 1, false},
		{"10%", 3, false, 0, false},
		{"100%", 7, false, 7, false},
		{"0%", 7, true, 0, false},
		{"150%", 2, true, 3, false},
		{"", 3, true, 0, true},
		{"-1", 3, true, 0, true},
		{"x%", 3, true, 0, true},
		{"1.5", 3, true, 0, true},
	}
	for _, tt := range tests {
		got, err := ResolveIntOrPercent(tt.in, tt.total, tt.roundUp)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ResolveIntOrPercent(%q, %d, %t) = %d, %v; want %d, err %t", tt.in, tt.total, tt.roundUp, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestNames(t *testing.T) {
	for s, want := range map[string]bool{"a": true, "md-0": true, "-a": false, "a-": false, "A": false, "": false} {
		if IsDNSLabel(s) != want {
			t.Errorf("IsDNSLabel(%q) != %t", s, want)
		}
	}
	for s, want := range map[string]bool{"app": true, "example.com/app": true, "node-role.kubernetes.io/worker": true, "/app": false, "a/b/c": false, "Example.com/x": false, "a_b.c": true} {
		if IsQualifiedName(s) != want {
			t.Errorf("IsQualifiedName(%q) != %t", s, want)
		}
	}
	for s, want := range map[string]bool{"": true, "v1": true, "a-b_c.d": true, "-a": false} {
		if IsLabelValue(s) != want {
			t.Errorf("IsLabelValue(%q) != %t", s, want)
		}
	}
}
