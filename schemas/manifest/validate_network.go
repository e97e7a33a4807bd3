package manifest

import (
	"net/netip"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

func validateNetwork(n *capnv1.NetworkSpec, p path, errs *fieldErrors) {
	if n == nil {
		return
	}
	pods := parseCIDRs(n.PodCidrs, p.child("podCidrs"), errs)
	svcs := parseCIDRs(n.ServiceCidrs, p.child("serviceCidrs"), errs)
	for _, s := range svcs {
		for _, pod := range pods {
			if s.prefix.Overlaps(pod.prefix) {
				errs.add(s.path, s.prefix.String(), "overlaps pod CIDR %s (%s): pod and service ranges must be disjoint", pod.prefix, pod.path)
			}
		}
	}
	if n.ServiceDomain != "" && !IsDNSSubdomain(n.ServiceDomain) {
		errs.add(p.child("serviceDomain"), n.ServiceDomain, "must be a DNS subdomain such as cluster.local")
	}
}

type cidr struct {
	prefix netip.Prefix
	path   path
}

// parseCIDRs parses a single-stack or dual-stack (one IPv4, one IPv6) list.
func parseCIDRs(in []string, p path, errs *fieldErrors) []cidr {
	var out []cidr
	if len(in) > 2 {
		errs.add(p, nil, "at most 2 CIDRs (one IPv4 and one IPv6 for dual-stack), have %d", len(in))
	}
	for i, s := range in {
		pref, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			errs.add(p.index(i), s, "must be a CIDR such as 10.96.0.0/12")
			continue
		case pref.Masked() != pref:
			errs.add(p.index(i), s, "has host bits set: did you mean %s?", pref.Masked())
			continue
		}
		for _, o := range out {
			if o.prefix.Addr().Is4() == pref.Addr().Is4() {
				errs.add(p.index(i), s, "same IP family as %s: dual-stack needs one IPv4 and one IPv6 CIDR", o.path)
			}
		}
		out = append(out, cidr{prefix: pref, path: p.index(i)})
	}
	return out
}
