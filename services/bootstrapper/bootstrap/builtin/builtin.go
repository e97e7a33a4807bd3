// Package builtin is the registry of the bootstrap providers shipped with
// capn: kubeadm (the default), script and kube-local.
package builtin

import (
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubeadm"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/script"
)

// Default is the provider an empty bootstrap.provider selects.
const Default = kubeadm.Name

var registry = func() *bootstrap.Registry {
	r, err := bootstrap.NewRegistry(Default, kubeadm.New(), script.New(), kubelocal.New())
	if err != nil {
		panic(err) // the built-in names are constants
	}
	return r
}()

// Registry returns the registry of built-in providers (shared, immutable).
func Registry() *bootstrap.Registry { return registry }

// Lookup is Registry().Lookup: the provider called name, kubeadm for "",
// or an error listing the available names.
func Lookup(name string) (bootstrap.Provider, error) { return registry.Lookup(name) }
