package dev

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

// banner is what capn dev tells its user once everything started.
type banner struct {
	srv         *server.Server
	natsContext string // the nats CLI's context file, "" when NATS is in-process only
	opsURL      string
	dataDir     string
	services    []string
	providers   []devProvider
	gateway     devGateway
	clientNotes []string
	kubeBin     string    // --kube-bin, "" for none
	off         []offPart // the optional parts that are off
	autoscaler  string
}

// autoscalerLine says where the cluster autoscaler finds capn.
func autoscalerLine(cfg Config, dataDir string) string {
	if cfg.AutoscalerListen == natsListenNone {
		return "off (--autoscaler-listen none)"
	}
	return fmt.Sprintf("%s once a cluster asks for autoscaling (mutual TLS; cluster-autoscaler --cloud-provider=externalgrpc --cloud-config=%s)",
		cfg.AutoscalerListen, filepath.Join(dataDir, AutoscalerDir, "clients", "<cluster>", "cloud-config"))
}

func printBanner(w io.Writer, b banner) {
	natsLine := "in-process only (--nats-listen none)"
	if b.srv.Addr() != nil {
		u := b.srv.ClientURL()
		natsLine = fmt.Sprintf("%s   (authenticated; try: nats --context %s stream ls)", u, b.natsContext)
	}
	svc := strings.Join(b.services, ", ")
	if svc == "" {
		svc = "none yet"
	}
	client := strings.Join(b.clientNotes, "\n            ")
	tokenPath := filepath.Join(b.dataDir, AdminTokenFile)
	fmt.Fprintf(w, `
capn dev is running
  gateway   %s   (try: capn apply -f examples/demo-cluster.yaml --wait)
  dashboard capn dashboard   (opens it logged in by a one-time link)
  token     %s   (admin; the whole token: cat %s)
  client    %s
  NATS      %s
  ops       %s
  data dir  %s
  services  %s
  providers %s
  autoscaler %s
  off       %s
Press Ctrl-C to stop.

`, b.gateway.URL(), shortToken(b.gateway.token), tokenPath, client, natsLine, b.opsURL, b.dataDir, svc,
		providersLine(b.providers, b.kubeBin), b.autoscaler, offLines(b.off))
}

// shortToken is enough of a token to tell it from another, and too little
// to use: the banner lands in logs people paste into bug reports.
func shortToken(tok string) string {
	const keep = 8
	if len(tok) <= keep {
		return "…"
	}
	return tok[:keep] + "…"
}
