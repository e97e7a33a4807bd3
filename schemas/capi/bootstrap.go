package capi

import (
	"encoding/base64"
	"maps"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// kubeadmSpec maps a KubeadmConfigSpec (a KubeadmControlPlane's
// spec.kubeadmConfigSpec, a KubeadmConfigTemplate's spec.template.spec) to
// capn's kubeadm bootstrap settings. It returns the nodeRegistration taints
// for the caller to map or report. nil when nothing maps.
func (c *converter) kubeadmSpec(o *object, n node, controlPlane bool) (*capnv1.BootstrapSpec, []node) {
	b := &capnv1.BootstrapSpec{}
	for _, f := range n.field("files").items() {
		if file := c.file(o, f); file != nil {
			b.Files = append(b.Files, file)
		}
	}
	b.PreCommands, _ = n.field("preKubeadmCommands").strings()
	b.PostCommands, _ = n.field("postKubeadmCommands").strings()
	if f := n.field("format"); f.exists() {
		switch s, _ := f.v.(string); s {
		case "cloud-config":
			f.use()
		case "ignition":
			// Ignition v3, rendered by capn's kubeadm bootstrap; the
			// ignition field's additional config is not (reported).
			b.Format = s
			f.use()
		}
	}

	join := n.get("joinConfiguration.nodeRegistration")
	b.KubeletExtraArgs = extraArgs(join.field("kubeletExtraArgs"))
	taints := join.field("taints").items()
	if controlPlane {
		// The first control-plane machine runs kubeadm init, the others join:
		// capn has one set of kubelet arguments for both.
		init := n.get("initConfiguration.nodeRegistration")
		ia := init.field("kubeletExtraArgs")
		switch initArgs := extraArgsPeek(ia); {
		case len(b.KubeletExtraArgs) == 0 && len(initArgs) > 0:
			b.KubeletExtraArgs = extraArgs(ia)
		case maps.Equal(initArgs, b.KubeletExtraArgs):
			if ia.exists() {
				ia.use()
			}
		default:
			c.note(o, ia, reasonInitArgs)
		}
		taints = append(taints, init.field("taints").items()...)
	}
	if len(b.Files)+len(b.PreCommands)+len(b.PostCommands)+len(b.KubeletExtraArgs) == 0 && b.Format == "" {
		return nil, taints
	}
	return b, taints
}

// file maps one entry of files, or reports it and returns nil.
func (c *converter) file(o *object, f node) *capnv1.File {
	if a, _ := f.field("append").v.(bool); a {
		c.note(o, f, reasonAppend)
		return nil
	}
	out := &capnv1.File{}
	if from := f.field("contentFrom"); from.exists() {
		// A key of a Secret: a key of the bootstrap secret of that name,
		// which the user stores (capn reads no Kubernetes Secret).
		name, _ := from.get("secret.name").v.(string)
		key, _ := from.get("secret.key").v.(string)
		enc, _ := f.field("encoding").v.(string)
		if name == "" || key == "" || (enc != "" && enc != "plain" && enc != "text/plain") {
			c.note(o, f, reasonSecret)
			return nil
		}
		out.SecretRef = &capnv1.FileSecretRef{Name: dnsLabel(name), Key: key}
		f.field("encoding").use()
		c.note(o, from, reasonSecretRef(out.SecretRef.Name, key))
	}
	out.Path, _ = f.field("path").str()
	if out.SecretRef == nil {
		out.Content, _ = f.field("content").str()
	}
	out.Owner, _ = f.field("owner").str()
	out.Permissions, _ = f.field("permissions").str()
	f.field("append").use()
	if out.SecretRef != nil {
		return out
	}
	switch enc, _ := f.field("encoding").v.(string); enc {
	case "", "plain", "text/plain":
		f.field("encoding").use()
	case "base64", "b64", "application/base64":
		raw, err := base64.StdEncoding.DecodeString(out.Content)
		if err != nil {
			c.note(o, f, reasonBadBase64(err))
			return nil
		}
		out.Content = string(raw)
		f.field("encoding").use()
	default:
		c.note(o, f, reasonEncoding(enc))
		return nil
	}
	return out
}

// extraArgs reads kubelet arguments: a mapping (v1beta1) or a list of
// {name, value} (v1beta2); consumed.
func extraArgs(n node) map[string]string {
	if _, ok := n.v.([]any); !ok {
		return n.stringMap()
	}
	var out map[string]string
	for _, it := range n.items() {
		name, ok := it.field("name").str()
		if !ok {
			continue
		}
		val, _ := it.field("value").str()
		if out == nil {
			out = map[string]string{}
		}
		out[name] = val
	}
	return out
}

// extraArgsPeek reads kubelet arguments without consuming them.
func extraArgsPeek(n node) map[string]string {
	peek := &object{used: map[string]bool{}}
	n.o = peek
	return extraArgs(n)
}

// taintsOf maps nodeRegistration taints; a taint without key or with an
// unknown effect is reported.
func (c *converter) taintsOf(o *object, nodes []node) []*capnv1.Taint {
	var out []*capnv1.Taint
	for _, t := range nodes {
		key, _ := t.field("key").v.(string)
		effect, _ := t.field("effect").v.(string)
		if key == "" || effect == "" {
			c.note(o, t, reasonTaint)
			continue
		}
		out = append(out, &capnv1.Taint{Key: key, Effect: effect})
		t.field("key").use()
		t.field("effect").use()
		out[len(out)-1].Value, _ = t.field("value").str()
		t.field("timeAdded").use()
	}
	return out
}
