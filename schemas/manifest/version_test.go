package manifest

import "testing"

func TestParseVersion(t *testing.T) {
	for _, s := range []string{"v1.34.2", "v0.0.0", "v1.34.0-rc.1", "v1.33.2+k3s1", "v1.35.0-alpha.0.12+abc"} {
		v, err := ParseVersion(s)
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		if v.String() != s {
			t.Errorf("%s round-trips to %s", s, v)
		}
	}
	for _, s := range []string{"", "1.34.2", "v1.34", "v01.2.3", "v1.2.3-", "v1.2.3.4", "latest"} {
		if _, err := ParseVersion(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
}

func TestVersionCompare(t *testing.T) {
	ordered := []string{"v1.9.9", "v1.10.0-alpha.1", "v1.10.0-alpha.2", "v1.10.0-alpha.beta", "v1.10.0-rc.1", "v1.10.0", "v1.10.1", "v2.0.0"}
	for i := range ordered {
		for j := range ordered {
			a, _ := ParseVersion(ordered[i])
			b, _ := ParseVersion(ordered[j])
			if got, want := a.Compare(b), sign(i-j); got != want {
				t.Errorf("%s vs %s = %d, want %d", a, b, got, want)
			}
		}
	}
	a, _ := ParseVersion("v1.2.3+a")
	b, _ := ParseVersion("v1.2.3+b")
	if a.Compare(b) != 0 {
		t.Error("build metadata must not order versions")
	}
}

func TestCompareVersions(t *testing.T) {
	ordered := []string{"v1.9.0", "v1.10.0-rc.1", "v1.10.0", "v1.36.5", "v1.37.0-rc.1", "v1.37.0", "v1.37.2", "v2.0.0", "devel", "latest"}
	for i := range ordered {
		for j := range ordered {
			if got, want := CompareVersions(ordered[i], ordered[j]), sign(i-j); got != want {
				t.Errorf("%s vs %s = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}
