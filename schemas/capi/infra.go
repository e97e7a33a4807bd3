package capi

import (
	"fmt"
	"slices"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Providers capn knows for Cluster API infrastructure kinds. Dev* kinds
// (CAPD's newer ones) say which backend in spec.backend (clusters) or
// spec.template.spec.backend (machine templates).
var kindProviders = map[string]string{
	"DockerCluster":             "docker",
	"DockerClusterTemplate":     "docker",
	"DockerMachineTemplate":     "docker",
	"DockerMachinePoolTemplate": "docker",
	"InMemoryCluster":           "sim",
	"InMemoryClusterTemplate":   "sim",
	"InMemoryMachineTemplate":   "sim",
}

// noParameters are the providers capn ships, none of which reads machine
// template parameters: what a template sets for them is reported as not
// mapped, with why, rather than passed on to be ignored.
var noParameters = map[string]string{
	"sim":     "the sim provider takes no parameters (its boot time is a setting of the provider, e.g. capn dev's)",
	"process": "the process provider takes no parameters (every machine is a capn-node process on the provider's host)",
	"docker":  "capn's docker provider takes no parameters (every machine runs its capn-node image, --docker-image; CAPD's node images and mounts do not apply)",
}

// backendProviders maps a Dev* object's backend to a provider.
var backendProviders = map[string]string{"docker": "docker", "inMemory": "sim"}

// providerOfKind is the capn provider of an infrastructure kind, or "".
// backendPath is where a Dev* object keeps its backend.
func providerOfKind(kind string, o *object, backendPath string) string {
	if p, ok := kindProviders[kind]; ok {
		return p
	}
	if (kind == "DevCluster" || kind == "DevClusterTemplate" || kind == "DevMachineTemplate") && o != nil {
		for _, e := range o.at().get(backendPath).entries(false) {
			if p, ok := backendProviders[e.key]; ok {
				return p
			}
		}
	}
	return ""
}

// template is a machine template's provider and capn template.
type template struct {
	provider string
	template *capnv1.MachineTemplate
}

// machineTemplate resolves an infrastructureRef to its provider and
// parameters: the template's spec.template.spec flattened to dotted keys
// (lists and mappings under them as JSON), passed to the provider as they
// are. capn's own providers (sim, process, docker) take no parameters, so a
// template bound for one of them maps none (they are reported instead).
func (c *converter) machineTemplate(owner *object, ref node) (template, error) {
	if !ref.exists() {
		if c.opts.Provider != "" {
			return template{provider: c.opts.Provider}, nil
		}
		return template{}, fmt.Errorf("%w: %s: %s: required: the machine template gives the machines' provider; or pass --provider NAME", ErrNeedProvider, owner.ref(), ref.path)
	}
	kind, name, tmpl := c.resolve(ref)
	known := providerOfKind(kind, tmpl, "spec.template.spec.backend")
	if known == "" && tmpl == nil {
		known = c.infraProvider // the template is missing: go by the cluster's infrastructure
	}
	provider := known
	switch {
	case c.opts.Provider != "" && known != "" && known != c.opts.Provider:
		provider = c.opts.Provider
		c.noteRef(owner, ref, kind, name, reasonProviderReplaced(known, c.opts.Provider))
	case c.opts.Provider != "":
		provider = c.opts.Provider
	case provider == "":
		return template{}, fmt.Errorf("%w: %s (%s, referenced by %s): capn knows Docker* (docker) and InMemory*/Dev* in-memory (sim) kinds; pass --provider NAME",
			ErrNeedProvider, kind, kind+"/"+name, owner.ref())
	}
	out := template{provider: provider}
	if tmpl == nil {
		c.noteRef(owner, ref, kind, name, reasonMissing(missingParameters))
		return out, nil
	}
	spec := tmpl.at().get("spec.template.spec")
	if b := spec.field("backend"); b.exists() { // Dev*: the backend's settings
		for _, e := range b.entries(false) {
			if _, ok := backendProviders[e.key]; ok {
				spec = e.val
				break
			}
		}
	}
	if why, ok := noParameters[provider]; ok {
		if !spec.empty() && !tmpl.used[spec.path] {
			c.note(tmpl, spec, why)
		}
		return out, nil
	}
	params := map[string]string{}
	flatten(spec, "", params)
	if len(params) > 0 {
		out.template = &capnv1.MachineTemplate{Parameters: params}
	}
	return out, nil
}

// flatten writes n's leaves into params under dotted keys; lists are kept
// whole, as JSON.
func flatten(n node, prefix string, params map[string]string) {
	for _, e := range n.entries(false) {
		key := e.key
		if prefix != "" {
			key = prefix + "." + e.key
		}
		if sub := e.val.entries(false); len(sub) > 0 {
			flatten(e.val, key, params)
			continue
		}
		if e.val.empty() {
			continue
		}
		params[key] = scalarJSON(e.val.v)
		e.val.use()
	}
}

// defineFailureDomains records the failure domains an infrastructure
// cluster (or cluster template) defines: every failureDomains under its
// spec, a mapping of names (v1beta1) or a list of {name} (v1beta2). Read
// without consuming: the definitions are reported with the rest of the
// infrastructure's settings.
func (c *converter) defineFailureDomains(o *object) {
	var walk func(n node)
	walk = func(n node) {
		for _, e := range n.entries(false) {
			if e.key != "failureDomains" {
				walk(e.val)
				continue
			}
			if c.fdDefinedIn == "" {
				c.fdDefinedIn = o.ref() + " " + e.val.path
			}
			for _, d := range e.val.entries(false) {
				c.fdNames = append(c.fdNames, d.key)
			}
			for _, d := range e.val.items() {
				if name, ok := d.field("name").v.(string); ok {
					c.fdNames = append(c.fdNames, name)
				}
			}
		}
	}
	walk(peek(o.root).field("spec"))
}

// failureDomain sets the pool's failure domain from n. A failure domain
// refers to one the infrastructure defines; when the input defines them,
// capn does not import the definitions (its provider offers its own), so
// the reference would dangle: it is dropped, with a note. When the input
// defines none, the name is the provider's own (a cloud's zone) and is
// kept.
func (c *converter) failureDomain(owner *object, n node, p *capnv1.WorkerPool) {
	fd, ok := n.v.(string)
	if !ok || fd == "" {
		return
	}
	if c.fdDefinedIn != "" {
		c.note(owner, n, reasonFailureDomain(fd, c.fdDefinedIn, slices.Contains(c.fdNames, fd)))
		return
	}
	n.use()
	if p.Template == nil {
		p.Template = &capnv1.MachineTemplate{}
	}
	p.Template.FailureDomain = fd
}
