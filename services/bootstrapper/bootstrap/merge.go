package bootstrap

import (
	"maps"
	"slices"
	"strings"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"google.golang.org/protobuf/proto"
)

// Merge returns the effective spec of a pool or the control plane: the
// cluster-wide base with override applied. Neither argument is changed.
//
//   - provider, tokenTtl, userData, format, commandTimeout: override's
//     when set, else base's; but
//     userData is not inherited when override selects another provider
//     than base (the base's script would not fit it).
//   - files: base's, with a file of the same path replaced in place by
//     override's, then override's other files in order.
//   - preCommands, postCommands: base's then override's.
//   - kubeletExtraArgs: union, override's value wins.
//   - ignorePreflightErrors: base's then override's others (each name
//     once, compared in lower case as kubeadm does).
//   - ca: base's only (the CA is cluster-wide).
func Merge(base, override *capnv1.BootstrapSpec) *capnv1.BootstrapSpec {
	out := &capnv1.BootstrapSpec{}
	if base != nil {
		out = proto.Clone(base).(*capnv1.BootstrapSpec)
	}
	if override == nil {
		return out
	}
	o := proto.Clone(override).(*capnv1.BootstrapSpec)
	if o.Provider != "" {
		if o.Provider != out.Provider {
			out.UserData = ""
		}
		out.Provider = o.Provider
	}
	if o.TokenTtl != nil {
		out.TokenTtl = o.TokenTtl
	}
	if o.UserData != "" {
		out.UserData = o.UserData
	}
	if o.Format != "" {
		out.Format = o.Format
	}
	if o.CommandTimeout != nil {
		out.CommandTimeout = o.CommandTimeout
	}
	byPath := map[string]*capnv1.File{}
	for _, f := range o.Files {
		byPath[f.GetPath()] = f
	}
	for i, f := range out.Files {
		if r, ok := byPath[f.GetPath()]; ok {
			out.Files[i] = r
			delete(byPath, f.GetPath())
		}
	}
	for _, f := range o.Files {
		if _, ok := byPath[f.GetPath()]; ok {
			out.Files = append(out.Files, f)
		}
	}
	out.PreCommands = append(out.PreCommands, o.PreCommands...)
	out.PostCommands = append(out.PostCommands, o.PostCommands...)
	for _, n := range o.IgnorePreflightErrors {
		if !slices.ContainsFunc(out.IgnorePreflightErrors, func(m string) bool { return strings.EqualFold(m, n) }) {
			out.IgnorePreflightErrors = append(out.IgnorePreflightErrors, n)
		}
	}
	if len(o.KubeletExtraArgs) > 0 {
		if out.KubeletExtraArgs == nil {
			out.KubeletExtraArgs = map[string]string{}
		}
		maps.Copy(out.KubeletExtraArgs, o.KubeletExtraArgs)
	}
	return out
}
