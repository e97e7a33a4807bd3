package bootstrap

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// ErrUnknownProvider means no provider of that name is registered.
var ErrUnknownProvider = errors.New("unknown bootstrap provider")

var providerNameRe = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// Registry selects a Provider by name. It is immutable once built and safe
// for concurrent use.
type Registry struct {
	providers map[string]Provider
	names     []string
	def       string
}

// NewRegistry registers providers; defaultName is the one an empty
// bootstrap.provider selects and must be among them.
func NewRegistry(defaultName string, providers ...Provider) (*Registry, error) {
	r := &Registry{providers: map[string]Provider{}, def: defaultName}
	for _, p := range providers {
		n := p.Name()
		if !providerNameRe.MatchString(n) {
			return nil, fmt.Errorf("bootstrap provider name %q: want lower case letters, digits and '-', starting with a letter", n)
		}
		if _, dup := r.providers[n]; dup {
			return nil, fmt.Errorf("bootstrap provider %q registered twice", n)
		}
		r.providers[n] = p
		r.names = append(r.names, n)
	}
	slices.Sort(r.names)
	if _, ok := r.providers[defaultName]; !ok {
		return nil, fmt.Errorf("default bootstrap provider %q is not registered (registered: %s)", defaultName, strings.Join(r.names, ", "))
	}
	return r, nil
}

// Names lists the registered providers, sorted.
func (r *Registry) Names() []string { return slices.Clone(r.names) }

// Default is the name an empty bootstrap.provider selects.
func (r *Registry) Default() string { return r.def }

// Lookup returns the provider called name, the default one for "". The
// error for an unknown name wraps ErrUnknownProvider and lists the
// available ones.
func (r *Registry) Lookup(name string) (Provider, error) {
	if name == "" {
		name = r.def
	}
	if p, ok := r.providers[name]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("%w %q (available: %s)", ErrUnknownProvider, name, strings.Join(r.names, ", "))
}

// Render validates in (the Input and its effective spec) and renders it
// with the provider the spec selects.
func (r *Registry) Render(in Input) (Output, error) {
	if err := in.Validate(); err != nil {
		return Output{}, err
	}
	p, err := r.Lookup(in.Spec.GetProvider())
	if err != nil {
		return Output{}, fmt.Errorf("bootstrap.provider: %w", err)
	}
	if err := r.ValidateFor("bootstrap", "os", in.OS, in.Spec); err != nil {
		return Output{}, err
	}
	out, err := p.Render(in)
	if err != nil {
		return Output{}, fmt.Errorf("bootstrap provider %s: %w", p.Name(), err)
	}
	return out, nil
}
