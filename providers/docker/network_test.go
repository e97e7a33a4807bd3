package docker

import (
	"net/netip"
	"testing"
)

func TestSubnetsSkipWhatOtherNetworksHold(t *testing.T) {
	pool := netip.MustParsePrefix("10.217.0.0/16")
	var got []netip.Prefix
	for s := range subnets(pool) {
		got = append(got, s)
	}
	if len(got) != 256 || got[0].String() != "10.217.0.0/24" || got[255].String() != "10.217.255.0/24" {
		t.Fatalf("%d subnets, first %v, last %v", len(got), got[0], got[len(got)-1])
	}
	taken := []netip.Prefix{netip.MustParsePrefix("10.217.0.0/23"), netip.MustParsePrefix("172.17.0.0/16")}
	var first netip.Prefix
	for s := range subnets(pool) {
		if !overlapsAny(s, taken) {
			first = s
			break
		}
	}
	if first.String() != "10.217.2.0/24" {
		t.Errorf("first free = %v", first)
	}
	var n int
	for range subnets(netip.MustParsePrefix("172.16.0.0/12")) {
		n++
	}
	if n != 4096 {
		t.Errorf("a /12 holds %d /24s", n)
	}
}

func TestNamesAndLabels(t *testing.T) {
	n := names{"capn"}
	if n.container("c1", "m1") != "capn.c1.m1" || n.endpoint("c1") != "capn.c1._endpoint" || n.network("c1") != "capn.c1" {
		t.Errorf("names: %s %s %s", n.container("c1", "m1"), n.endpoint("c1"), n.network("c1"))
	}
	l := n.labels("c1", "m1", RoleMachine)
	if !n.ours(l, "c1", "m1", RoleMachine) || n.ours(l, "c1", "m2", RoleMachine) || (names{"other"}).ours(l, "c1", "m1", RoleMachine) {
		t.Error("ours does not tell machines and deployments apart")
	}
	if _, ok := n.labels("c1", "", "")[LabelRole]; ok {
		t.Error("an empty role became a label filter")
	}
}

func TestSelfAddressIsTheLastHostAddress(t *testing.T) {
	for sub, want := range map[string]string{"10.217.3.0/24": "10.217.3.254", "10.0.0.0/16": "10.0.255.254", "192.168.4.128/25": "192.168.4.254"} {
		if got := selfAddress(netip.MustParsePrefix(sub)); got.String() != want {
			t.Errorf("selfAddress(%s) = %s, want %s", sub, got, want)
		}
	}
}

func TestSelfCandidatesFromMountsAndCgroups(t *testing.T) {
	id := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	line := "612 590 8:1 /var/lib/docker/containers/" + id + "/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/sda1 rw"
	if m := containerIDInPath.FindStringSubmatch(line); m == nil || m[1] != id {
		t.Errorf("mountinfo: %v", m)
	}
	for _, l := range []string{"12:pids:/docker/" + id, "0::/system.slice/docker-" + id + ".scope"} {
		if m := containerIDInCgroup.FindStringSubmatch(l); m == nil || m[1] != id {
			t.Errorf("cgroup %q: %v", l, m)
		}
	}
	if containerIDInCgroup.MatchString("0::/") || shortContainerID.MatchString("vm") {
		t.Error("a host matched")
	}
}
