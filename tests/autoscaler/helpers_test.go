package autoscaler

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/providers/conformance"
	"github.com/capn-dev/capn/providers/process"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// autoscalerBin is $CAPN_AUTOSCALER_BIN, the cluster-autoscaler `make
// autoscaler` builds (make test passes it), or skips the test — fails it
// under CAPN_REQUIRE_AUTOSCALER=1 (CI).
func autoscalerBin(t *testing.T) string {
	t.Helper()
	path := os.Getenv("CAPN_AUTOSCALER_BIN")
	why := ""
	if path == "" {
		why = "CAPN_AUTOSCALER_BIN is not set"
	} else if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		why = fmt.Sprintf("CAPN_AUTOSCALER_BIN %s is no executable", path)
	}
	if why == "" {
		return path
	}
	if os.Getenv("CAPN_REQUIRE_AUTOSCALER") == "1" {
		t.Fatalf("CAPN_REQUIRE_AUTOSCALER=1 but %s: build it with `make autoscaler` (CAPN_AUTOSCALER_BIN=$(make -s autoscaler-bin))", why)
	}
	t.Skipf("%s: build the cluster-autoscaler with `make autoscaler` and set CAPN_AUTOSCALER_BIN=$(make -s autoscaler-bin) (CAPN_REQUIRE_AUTOSCALER=1 fails instead)", why)
	return ""
}

// startPrograms runs the process provider (--kube-bin; its machines'
// capn-node built beside it) and the autoscaler-provider (with tlsDir's
// certificates, listening on addr) on natsURL until the test ends.
func startPrograms(t *testing.T, kubeBin, natsURL, tlsDir, addr string) {
	t.Helper()
	progs, err := conformance.BuildTemp("capn-provider-process", "capn-node", "autoscaler-provider")
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "process")
	t.Cleanup(func() {
		if err := process.Purge(process.Options{StateDir: state}); err != nil {
			t.Errorf("purge the process provider's state: %v", err)
		}
		_ = os.RemoveAll(progs)
	})
	env := []string{"CAPN_LOG_LEVEL=info", "CAPN_LOG_FORMAT=json"}
	conformance.StartProgram(t, filepath.Join(progs, "capn-provider-process"), env,
		"--nats-url="+natsURL, "--http-addr=off",
		"--kube-bin="+kubeBin,
		"--process-state-dir="+state,
		"--process-node-binary="+filepath.Join(progs, "capn-node"),
		"--process-heartbeat-every=1s",
		"--process-watch-every=250ms",
		"--process-stop-timeout=20s",
		"--process-health-port=-1",
		"--provider-reconcile-every=1s",
		"--provider-announce-every=1s",
	)
	conformance.StartProgram(t, filepath.Join(progs, "autoscaler-provider"), env,
		"--nats-url="+natsURL, "--http-addr=off",
		"--autoscaler-listen="+addr,
		"--autoscaler-tls-cert="+filepath.Join(tlsDir, "server.crt"),
		"--autoscaler-tls-key="+filepath.Join(tlsDir, "server.key"),
		"--autoscaler-tls-client-ca="+filepath.Join(tlsDir, "ca.crt"),
	)
}

// startAutoscaler runs the cluster-autoscaler against the workload
// cluster (kubeconfig) and capn (cloudConfig), with the scale-down delays
// short, until the test ends or stop is called. Its log is printed when
// the test fails.
func startAutoscaler(t *testing.T, bin, kubeconfig, cloudConfig string) (stop func()) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "cluster-autoscaler.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	metrics := freeAddr(t)
	cmd := exec.Command(bin,
		"--cloud-provider=externalgrpc", "--cloud-config="+cloudConfig, "--kubeconfig="+kubeconfig,
		"--leader-elect=false", "--address="+metrics, "--v=4",
		"--scan-interval=2s", "--new-pod-scale-up-delay=0s",
		"--scale-down-delay-after-add=5s", "--scale-down-unneeded-time=5s", "--scale-down-delay-after-delete=0s",
		"--scale-down-delay-after-failure=5s", "--unremovable-node-recheck-timeout=10s",
		"--max-node-provision-time=5m", "--max-graceful-termination-sec=10",
		"--skip-nodes-with-system-pods=false", "--skip-nodes-with-local-storage=false",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start cluster-autoscaler: %v", err)
	}
	logf.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				if len(b) > 24<<10 {
					b = b[len(b)-24<<10:]
				}
				t.Logf("cluster-autoscaler log (last 24 KiB):\n%s", b)
			}
		}
	}
	t.Cleanup(stop)
	return stop
}

// autoscalerStatus is the part of the autoscaler's status ConfigMap
// (kube-system/cluster-autoscaler-status, data.status) the test reads.
type autoscalerStatus struct {
	NodeGroups []struct {
		Name   string `json:"name"`
		Health struct {
			CloudProviderTarget int `json:"cloudProviderTarget"`
			NodeCounts          struct {
				Registered struct {
					Ready int `json:"ready"`
				} `json:"registered"`
			} `json:"nodeCounts"`
		} `json:"health"`
	} `json:"nodeGroups"`
}

// groupStatus is what the autoscaler's status says of node group id:
// its target size (from capn) and ready Nodes; ok is false without one.
func groupStatus(k *conformance.KubeCluster, id string) (target, ready int, ok bool) {
	out, err := k.Kubectl("get", "configmap", "cluster-autoscaler-status", "-n", "kube-system", "-o", "jsonpath={.data.status}")
	if err != nil {
		return 0, 0, false
	}
	var st autoscalerStatus
	if err := yaml.Unmarshal([]byte(out), &st); err != nil {
		return 0, 0, false
	}
	for _, g := range st.NodeGroups {
		if g.Name == id {
			return g.Health.CloudProviderTarget, g.Health.NodeCounts.Registered.Ready, true
		}
	}
	return 0, 0, false
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// autoscalerEvents are the cluster's AutoscalerEvents on its timeline.
func autoscalerEvents(t *testing.T, js jetstream.JetStream, cluster string) []*capnv1.AutoscalerEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.EventSubject("autoscaler", "*", cluster, "*")}})
	if err != nil {
		t.Fatal(err)
	}
	var out []*capnv1.AutoscalerEvent
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(300 * time.Millisecond))
		if err != nil {
			return out
		}
		e, err := events.FromMsg(msg.Headers(), msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		ev := &capnv1.AutoscalerEvent{}
		if err := events.DataAs(e, ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

// podsOf is "name phase node" of the pods with label app=<app>.
func podsOf(k *conformance.KubeCluster, app string) ([][3]string, error) {
	out, err := k.Kubectl("get", "pods", "-n", "default", "-l", "app="+app, "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.spec.nodeName}{"\n"}{end}`)
	if err != nil {
		return nil, err
	}
	var pods [][3]string
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		var p [3]string
		copy(p[:], f)
		pods = append(pods, p)
	}
	return pods, nil
}
