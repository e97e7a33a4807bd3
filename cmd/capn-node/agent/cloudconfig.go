package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/capn-dev/capn/cmd/capn-node/cloudconfig"
	"github.com/capn-dev/capn/cmd/capn-node/runcmd"
)

// CloudConfigLog (under the data dir) gets every line the cloud-config
// runner and its commands print on a real node (Config.RunCloudConfig).
const CloudConfigLog = "logs/cloud-config.log"

// runCloudConfig runs the machine's #cloud-config data on this host, as
// cloud-init would (a real node: Config.RunCloudConfig), and records the
// checksum as applied once every command succeeded: a restarted agent
// does not run kubeadm again, as cloud-init runs once per instance.
func (a *Agent) runCloudConfig(ctx context.Context, data []byte, ca string) error {
	c, err := cloudconfig.Parse(data)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrJoinMaterial, err)
	}
	logPath := filepath.Join(a.cfg.DataDir, CloudConfigLog)
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return err
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	root := a.cloudConfigRoot
	if root == "" {
		root = "/"
	}
	r := cloudconfig.Runner{Root: root, Log: log, Commands: runcmd.Runner{Dir: "/", Output: log, TailLines: 20}}
	start := time.Now()
	a.log.Info().Int("files", len(c.WriteFiles)).Int("commands", len(c.RunCmd)).Str("ca_cert_hash", ca).
		Bool("ca_pinned", a.cfg.CACertHash != "").Str("log", logPath).Msg("running the bootstrap data on this node")
	rep, err := r.Run(ctx, c)
	if err != nil {
		return fmt.Errorf("run the bootstrap data after %s (%s): %w", time.Since(start).Round(time.Millisecond), logPath, err)
	}
	if err := writeFile(filepath.Join(a.cfg.DataDir, StateDir, AppliedFile), []byte(a.cfg.BootstrapChecksum+"\n"), 0o600); err != nil {
		return err
	}
	a.log.Info().Int("files", len(rep.Files)).Int("commands", len(rep.Commands)).Dur("took", time.Since(start)).Msg("bootstrap data run on this node")
	return nil
}
