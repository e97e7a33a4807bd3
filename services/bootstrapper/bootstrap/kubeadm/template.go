package kubeadm

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/capn-dev/capn/secrets/token"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap"
	"github.com/capn-dev/capn/services/bootstrapper/bootstrap/cloudinit"
	yaml "go.yaml.in/yaml/v2"
)

// A joining machine's cloud-config (a worker, or a control-plane machine
// joining) differs from its pool's others only in its node name and join
// token, both inside its kubeadm JoinConfiguration, which the cloud-config
// holds base64-encoded. Rendering it is mostly YAML encoding of what is
// the same for the whole pool: the PKI files of a control-plane machine,
// the user's files and commands, the rest of the configuration. A
// joinTemplate is that rendering done once, with stand-ins for the name
// and token, cut where they go; a machine's data is the template with its
// own name and token (as YAML writes them) put back, and the
// configuration base64-encoded into the document. The bytes are the same
// as a full render's (template_test.go compares them); whatever the
// template cannot stand for (a stand-in found elsewhere, a value YAML
// would not write on one line) is rendered in full.

// Stand-ins for the node name and the join token: a valid node name and a
// valid token (the template is rendered through the same validation), and
// a plain YAML scalar for the configuration's content.
const (
	nameStandIn    = "capn-template-node-name-0"
	contentStandIn = "CapnTemplateConfigContent0"
)

var tokenStandIn = token.Token{ID: "zq0zq0", Secret: "zq0zq0zq0zq0zq0z"}

type joinTemplate struct {
	// config is the JoinConfiguration in three parts around its two
	// stand-ins; nameFirst says which comes first.
	config    [3]string
	nameFirst bool
	// doc is the cloud-config around the configuration's base64 content.
	doc [2]string
}

// templates holds the templates of the pools rendered last, by
// templateKey; it is emptied when full (maxTemplates).
var templates struct {
	mu sync.Mutex
	by map[[sha256.Size]byte]*joinTemplate
}

const maxTemplates = 512

// renderJoin renders a joining linux machine's cloud-config from its
// pool's template, making the template first if needed; ok is false when
// the input cannot be rendered so (the caller renders it in full). in has
// passed Render's validation.
func renderJoin(in bootstrap.Input) (data []byte, ok bool) {
	name, ok := plainScalar(in.Machine)
	if !ok {
		return nil, false
	}
	tok, ok := plainScalar(in.Token.Value())
	if !ok {
		return nil, false
	}
	key := templateKey(in)
	templates.mu.Lock()
	t := templates.by[key]
	templates.mu.Unlock()
	if t == nil {
		if t, ok = newJoinTemplate(in); !ok {
			return nil, false
		}
		templates.mu.Lock()
		if templates.by == nil || len(templates.by) >= maxTemplates {
			templates.by = map[[sha256.Size]byte]*joinTemplate{}
		}
		templates.by[key] = t
		templates.mu.Unlock()
	}
	first, second := tok, name
	if t.nameFirst {
		first, second = name, tok
	}
	config := t.config[0] + first + t.config[1] + second + t.config[2]
	content := base64.StdEncoding.EncodeToString([]byte(config))
	if !plainBase64(content) {
		return nil, false
	}
	return []byte(t.doc[0] + content + t.doc[1]), true
}

// newJoinTemplate renders in with the stand-ins and cuts the result
// around them.
func newJoinTemplate(in bootstrap.Input) (*joinTemplate, bool) {
	in.Machine, in.Token = nameStandIn, tokenStandIn
	config, _, err := kubeadmConfig(in)
	if err != nil {
		return nil, false
	}
	c := string(config)
	if strings.Count(c, nameStandIn) != 1 || strings.Count(c, tokenStandIn.Value()) != 1 {
		return nil, false
	}
	t := &joinTemplate{}
	n, k := strings.Index(c, nameStandIn), strings.Index(c, tokenStandIn.Value())
	t.nameFirst = n < k
	a, b := k, len(tokenStandIn.Value())
	c1, c2 := n, len(nameStandIn)
	if t.nameFirst {
		a, b, c1, c2 = n, len(nameStandIn), k, len(tokenStandIn.Value())
	}
	t.config = [3]string{c[:a], c[a+b : c1], c[c1+c2:]}

	files := cloudinit.Files(linuxFiles(in))
	files = append(files, cloudinit.WriteFile{Path: bootstrap.KubeadmJoinConfig, Owner: "root:root", Permissions: "0600",
		Encoding: "b64", Content: contentStandIn})
	doc, err := cloudinit.Marshal(cloudinit.Config{WriteFiles: files, RunCmd: runCmd(in, "join", bootstrap.KubeadmJoinConfig)})
	if err != nil {
		return nil, false
	}
	d := string(doc)
	if strings.Count(d, contentStandIn) != 1 {
		return nil, false
	}
	i := strings.Index(d, contentStandIn)
	t.doc = [2]string{d[:i], d[i+len(contentStandIn):]}
	return t, true
}

// plainScalar is s as YAML writes a string value: ok only when that is
// one line (a name or token always is; quoted if it reads as a number or
// a boolean). Lower-case letters, digits, dots and dashes after a letter
// are written as they are once longer than the words YAML reads as
// booleans or null (at most 5 letters): most names and tokens skip the
// encoder.
func plainScalar(s string) (string, bool) {
	if len(s) >= 6 && s[0] >= 'a' && s[0] <= 'z' && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") == "" {
		return s, true
	}
	b, err := yaml.Marshal(s)
	if err != nil || len(b) == 0 || b[len(b)-1] != '\n' || strings.Contains(string(b[:len(b)-1]), "\n") {
		return "", false
	}
	return string(b[:len(b)-1]), true
}

// plainBase64 says that YAML writes s, base64, as a plain scalar, as it
// wrote the content stand-in: it starts with a letter (no number,
// indicator or sign), is longer than any word YAML reads as a boolean or
// null, and has no space to fold at.
func plainBase64(s string) bool {
	if len(s) < 6 || !(s[0] >= 'A' && s[0] <= 'Z' || s[0] >= 'a' && s[0] <= 'z') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return false
		}
	}
	return true
}

// templateKey identifies everything of in a join's data depends on but
// the node name and the token: every field of bootstrap.Input but
// Machine and Token (TestTemplateKeyCoversInput holds that line).
func templateKey(in bootstrap.Input) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	field := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	str := func(s string) { field([]byte(s)) }
	msg := func(m proto.Message) {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		field(b)
	}
	str(in.Cluster)
	str(string(in.Role))
	if in.FirstControlPlane {
		str("first")
	} else {
		str("")
	}
	str(in.KubernetesVersion)
	str(string(in.OS))
	str(in.Endpoint.Host)
	binary.BigEndian.PutUint64(n[:], uint64(in.Endpoint.Port))
	h.Write(n[:])
	msg(in.Network)
	msg(in.Spec)
	labels := sortedKeys(in.Labels)
	binary.BigEndian.PutUint64(n[:], uint64(len(labels)))
	h.Write(n[:])
	for _, k := range labels {
		str(k)
		str(in.Labels[k])
	}
	binary.BigEndian.PutUint64(n[:], uint64(len(in.Taints)))
	h.Write(n[:])
	for _, t := range in.Taints {
		msg(t)
	}
	p := in.PKI
	for _, b := range [][]byte{p.CACert, p.CAKey, p.EtcdCACert, p.EtcdCAKey, p.FrontProxyCACert, p.FrontProxyCAKey, p.ServiceAccountPublic, p.ServiceAccountKey} {
		field(b)
	}
	binary.BigEndian.PutUint64(n[:], uint64(in.TokenTTL))
	h.Write(n[:])
	str(in.CACertHash)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}
