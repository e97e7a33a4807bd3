package capnv1alpha1

import "google.golang.org/protobuf/proto"

// NewGenerateBootstrap is the GenerateBootstrap request of desired machine
// m of cluster: what the machine-manager's capn.cmd.bootstrap.generate
// carries and what the bootstrapper generates from a new desired machine
// by itself. One builder for both, so the two make the same request (the
// same input hash: one data, never two). The bootstrap spec goes without
// its CA: the bootstrapper holds it, and no key travels in a command.
func NewGenerateBootstrap(cluster, name string, m *Machine) *GenerateBootstrap {
	spec := m.GetSpec()
	b := proto.Clone(spec.GetBootstrap()).(*BootstrapSpec)
	if b != nil {
		b.Ca = nil
	}
	return &GenerateBootstrap{Cluster: cluster, Machine: name, MachineUid: m.GetMetadata().GetUid(), Role: spec.GetRole(), FirstControlPlane: spec.GetFirstControlPlane(),
		Version: spec.GetVersion(), Bootstrap: b, Labels: spec.GetLabels(), Taints: spec.GetTaints(), Os: spec.GetOs()}
}
