package process

// SetAPIServerPort sets the port of the cluster endpoints' backends (the
// machines' API servers), so that a test's fake API server need not take
// 6443.
func SetAPIServerPort(o *Options, port int) { o.apiServerPort = port }

// CapabilitiesOf is what a provider with o announces, without starting it
// (node mode's New needs the node stack).
func CapabilitiesOf(o Options) []string { return (&Provider{opts: o}).Capabilities() }
