package kubeapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// Server-side apply of arbitrary objects (the addon-manager's add-ons),
// with just enough discovery to find an object's REST path from its
// apiVersion and kind — what client-go's RESTMapper does.

// FieldManager is the field manager of every server-side apply capn makes.
const FieldManager = "capn"

// MediaApplyPatch is the content type of a server-side apply.
const MediaApplyPatch = "application/apply-patch+yaml"

// ErrNoKind means the API server serves no resource of that apiVersion and
// kind (yet: a CustomResourceDefinition not established, an API group not
// served). It is retried like any other failure.
var ErrNoKind = errors.New("no such kind on the API server")

// Resource is where the objects of one kind live.
type Resource struct {
	// GroupVersion is "v1" or "group/version".
	GroupVersion string
	// Name is the resource's plural, e.g. deployments.
	Name       string
	Namespaced bool
}

// Collection is the REST path of the kind's objects in namespace (ignored
// for a cluster-scoped kind).
func (r Resource) Collection(namespace string) string {
	base := "/apis/" + r.GroupVersion
	if !strings.Contains(r.GroupVersion, "/") {
		base = "/api/" + r.GroupVersion
	}
	if r.Namespaced {
		base += "/namespaces/" + url.PathEscape(namespace)
	}
	return base + "/" + r.Name
}

// ObjectPath is the REST path of the object name in namespace.
func (r Resource) ObjectPath(namespace, name string) string {
	return r.Collection(namespace) + "/" + url.PathEscape(name)
}

// discovery caches what the API server serves, per group version, for a
// client's life. A kind that is not found reads its group version again
// once per lookup (a CustomResourceDefinition applied just before).
type discovery struct {
	mu sync.Mutex
	// byGV: kind → resource, per group version read.
	byGV map[string]map[string]Resource
}

func (c *Client) discovery() *discovery {
	if d := c.disc.Load(); d != nil {
		return d
	}
	c.disc.CompareAndSwap(nil, &discovery{byGV: map[string]map[string]Resource{}})
	return c.disc.Load()
}

// ResourceFor finds the resource of apiVersion and kind: from the cache,
// else from the API server's discovery (GET /api/v1 or
// /apis/<group>/<version>), read again when the kind is missing. A group
// version the server does not serve, or a kind it does not have there, is
// ErrNoKind.
func (c *Client) ResourceFor(ctx context.Context, apiVersion, kind string) (Resource, error) {
	d := c.discovery()
	d.mu.Lock()
	kinds, ok := d.byGV[apiVersion]
	d.mu.Unlock()
	if ok {
		if r, ok := kinds[kind]; ok {
			return r, nil
		}
	}
	kinds, err := c.discover(ctx, apiVersion)
	if err != nil {
		return Resource{}, err
	}
	d.mu.Lock()
	d.byGV[apiVersion] = kinds
	d.mu.Unlock()
	if r, ok := kinds[kind]; ok {
		return r, nil
	}
	return Resource{}, fmt.Errorf("%w: %s %s", ErrNoKind, apiVersion, kind)
}

// discover reads one group version's resources (subresources left out).
func (c *Client) discover(ctx context.Context, apiVersion string) (map[string]Resource, error) {
	p := "/apis/" + apiVersion
	if !strings.Contains(apiVersion, "/") {
		p = "/api/" + apiVersion
	}
	var list struct {
		Resources []struct {
			Name       string `json:"name"`
			Kind       string `json:"kind"`
			Namespaced bool   `json:"namespaced"`
		} `json:"resources"`
	}
	if err := c.Get(ctx, p, &list); err != nil {
		if IsStatus(err, http.StatusNotFound) {
			return nil, fmt.Errorf("%w: the API server serves no %s", ErrNoKind, apiVersion)
		}
		return nil, fmt.Errorf("discover %s: %w", apiVersion, err)
	}
	out := map[string]Resource{}
	for _, r := range list.Resources {
		if strings.Contains(r.Name, "/") {
			continue
		}
		out[r.Kind] = Resource{GroupVersion: apiVersion, Name: r.Name, Namespaced: r.Namespaced}
	}
	return out, nil
}

// ApplyOptions tune ServerSideApply.
type ApplyOptions struct {
	// Force takes over the fields the object names from any other field
	// manager (kubectl apply --server-side --force-conflicts). Without it a
	// field another manager set is a 409 conflict.
	Force bool
}

// ServerSideApply applies obj (a whole object: apiVersion, kind,
// metadata.name, and metadata.namespace for a namespaced kind, "default"
// when it has none) with server-side apply as field manager capn: PATCH
// with application/apply-patch+yaml (JSON is YAML) to the object's path,
// which creates it or merges the fields it names, and owns them. The
// result is the object as stored (out, when not nil); created says the
// apply created it (201: it did not exist).
func (c *Client) ServerSideApply(ctx context.Context, obj map[string]any, opts ApplyOptions, out any) (created bool, err error) {
	apiVersion, kind, namespace, name := identity(obj)
	if apiVersion == "" || kind == "" || name == "" {
		return false, fmt.Errorf("server-side apply: the object needs apiVersion, kind and metadata.name")
	}
	r, err := c.ResourceFor(ctx, apiVersion, kind)
	if err != nil {
		return false, fmt.Errorf("apply %s %s: %w", kind, name, err)
	}
	if r.Namespaced && namespace == "" {
		namespace = "default"
		obj = withNamespace(obj, namespace)
	}
	q := url.Values{"fieldManager": {FieldManager}}
	if opts.Force {
		q.Set("force", "true")
	}
	p := r.ObjectPath(namespace, name) + "?" + q.Encode()
	code, err := c.do(ctx, http.MethodPatch, p, MediaApplyPatch, obj, out)
	if err != nil {
		return false, fmt.Errorf("apply %s %s: %w", kind, objectName(r, namespace, name), err)
	}
	return code == http.StatusCreated, nil
}

// DeleteObject deletes the object of apiVersion and kind named name (in
// namespace, "default" for a namespaced kind without one), its dependents
// in the background. gone is false when it was already gone; a kind the
// server does not serve has no object to delete either.
func (c *Client) DeleteObject(ctx context.Context, apiVersion, kind, namespace, name string) (gone bool, err error) {
	r, err := c.ResourceFor(ctx, apiVersion, kind)
	if errors.Is(err, ErrNoKind) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if r.Namespaced && namespace == "" {
		namespace = "default"
	}
	body := map[string]any{"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
	err = c.Do(ctx, http.MethodDelete, r.ObjectPath(namespace, name), "application/json", body, nil)
	if IsStatus(err, http.StatusNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("delete %s %s: %w", kind, objectName(r, namespace, name), err)
	}
	return true, nil
}

// GetObject reads the object of apiVersion and kind named name into out.
func (c *Client) GetObject(ctx context.Context, apiVersion, kind, namespace, name string, out any) error {
	r, err := c.ResourceFor(ctx, apiVersion, kind)
	if err != nil {
		return err
	}
	if r.Namespaced && namespace == "" {
		namespace = "default"
	}
	return c.Get(ctx, r.ObjectPath(namespace, name), out)
}

func objectName(r Resource, namespace, name string) string {
	if r.Namespaced {
		return namespace + "/" + name
	}
	return name
}

func identity(obj map[string]any) (apiVersion, kind, namespace, name string) {
	apiVersion, _ = obj["apiVersion"].(string)
	kind, _ = obj["kind"].(string)
	md, _ := obj["metadata"].(map[string]any)
	namespace, _ = md["namespace"].(string)
	name, _ = md["name"].(string)
	return apiVersion, kind, namespace, name
}

// withNamespace is obj with metadata.namespace set (obj is not changed).
func withNamespace(obj map[string]any, ns string) map[string]any {
	out := make(map[string]any, len(obj))
	for k, v := range obj {
		out[k] = v
	}
	md := map[string]any{}
	if m, ok := obj["metadata"].(map[string]any); ok {
		for k, v := range m {
			md[k] = v
		}
	}
	md["namespace"] = ns
	out["metadata"] = md
	return out
}
