package main

import "github.com/capn-dev/capn/services/runtime"

// devServices lists every service capn dev runs, configured from cfg.
// Each issue that adds a service registers it here, e.g.
//
//	gateway.New(gateway.Options{Addr: "127.0.0.1:8080"}),
//
// capn dev gives each its own in-process NATS connection, its logs and
// metrics labelled service=<name>, and its place in /readyz.
func devServices(cfg devConfig) []runtime.Service {
	_ = cfg // services take what they need from it as they arrive
	services := []runtime.Service{}
	return append(services, extraDevServices...)
}

// extraDevServices run after devServices' own; tests add theirs here to
// prove the wiring. It is empty in the binary.
var extraDevServices []runtime.Service
