package keys

import "testing"

func TestMachineUserRoundTrip(t *testing.T) {
	c, m, ok := ParseMachineUser(MachineUser("demo", "demo-cp-abc12"))
	if !ok || c != "demo" || m != "demo-cp-abc12" {
		t.Fatalf("ParseMachineUser(MachineUser) = %q, %q, %v", c, m, ok)
	}
	for _, bad := range []string{"", "node", "machine.", "machine.c", "machine.c.", "machine..m", "machine.c.m.x",
		"machine.c.*", "machine.*.m", "machine.c.>", "machine.c.m ", "cluster.c.m", "Machine.c.m"} {
		if c, m, ok := ParseMachineUser(bad); ok {
			t.Errorf("ParseMachineUser(%q) = %q, %q, true; want refused", bad, c, m)
		}
	}
}
