package cli

import "strings"

// resource is a type of object the CLI names, with the words kubectl
// users type for it: capn get clusters, capn get cluster/demo, cl/demo.
type resource struct{ singular, plural, short string }

var (
	resCluster  = resource{"cluster", "clusters", "cl"}
	resMachine  = resource{"machine", "machines", "ma"}
	resAddonSet = resource{"addonset", "addonsets", "as"}
	resClass    = resource{"clusterclass", "clusterclasses", "cc"}
	resources   = []resource{resCluster, resMachine, resAddonSet, resClass}
)

func resourceOf(word string) (resource, bool) {
	for _, r := range resources {
		if word == r.singular || word == r.plural || word == r.short {
			return r, true
		}
	}
	return resource{}, false
}

// refs are the objects a command line names: one type, and the names
// (none for a list).
type refs struct {
	res   resource
	names []string
}

// parseRefs reads positional arguments the way kubectl does: TYPE
// [NAME...] or TYPE/NAME... (what capn get -o name prints), one type at a
// time.
func parseRefs(pos []string) (refs, error) {
	if len(pos) == 0 {
		return refs{}, usagef("missing what: clusters, machines, addonsets, clusterclasses, or TYPE/NAME")
	}
	if !strings.Contains(pos[0], "/") {
		res, ok := resourceOf(pos[0])
		if !ok {
			return refs{}, usagef("unknown type %q: capn has clusters, machines, addonsets and clusterclasses", pos[0])
		}
		for _, p := range pos[1:] {
			if strings.Contains(p, "/") {
				return refs{}, usagef("%q: give either TYPE NAME... or TYPE/NAME..., not both", p)
			}
		}
		return refs{res, pos[1:]}, nil
	}
	var r refs
	for i, p := range pos {
		res, name, err := splitRef(p)
		if err != nil {
			return refs{}, err
		}
		if i > 0 && res != r.res {
			return refs{}, usagef("%q: one type at a time (%s/... first)", p, r.res.singular)
		}
		r.res = res
		r.names = append(r.names, name)
	}
	return r, nil
}

// splitRef reads TYPE/NAME.
func splitRef(arg string) (resource, string, error) {
	typ, name, _ := strings.Cut(arg, "/")
	res, ok := resourceOf(typ)
	switch {
	case !ok:
		return resource{}, "", usagef("%q: unknown type %q: capn has clusters, machines, addonsets and clusterclasses (cluster/NAME, machine/NAME, addonset/NAME, clusterclass/NAME)", arg, typ)
	case name == "" || strings.Contains(name, "/"):
		return resource{}, "", usagef("%q: want TYPE/NAME, e.g. cluster/demo", arg)
	}
	return res, name, nil
}

// clusterArg is a cluster argument of the command cmd ("capn scale"):
// NAME or cluster/NAME (also clusters/NAME, cl/NAME).
func clusterArg(arg, cmd string) (string, error) {
	if !strings.Contains(arg, "/") {
		return arg, nil
	}
	res, name, err := splitRef(arg)
	if err != nil {
		return "", err
	}
	if res != resCluster {
		return "", usagef("%q is a %s: %s takes a cluster (NAME or cluster/NAME)", arg, res.singular, cmd)
	}
	return name, nil
}

// oneCluster is the one argument of a command that takes a cluster.
func oneCluster(pos []string, cmd string) (string, error) {
	if err := wantArgs(pos, "the cluster's NAME"); err != nil {
		return "", err
	}
	return clusterArg(pos[0], cmd)
}
