package agent

import (
	"github.com/capn-dev/capn/cmd/capn-node/kube"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/kubelocal"
)

// SetNewKube replaces how a builds its control-plane runtime.
func SetNewKube(a *Agent, f func(*kubelocal.NodeConfig, kube.Options) (KubeRuntime, error)) {
	a.newKube = f
}

// SetCloudConfigRoot makes RunCloudConfig write its files under root.
func SetCloudConfigRoot(a *Agent, root string) { a.cloudConfigRoot = root }
