package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/capn-dev/capn/events/store"
	"github.com/capn-dev/capn/gateway/api"
	"github.com/capn-dev/capn/schemas/health/policy"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/schemas/manifest"
)

// reach is the set of clusters a token may report health of: those named,
// and those whose labels the selector matches.
type reach struct {
	clusters []string
	selector labels.Selector // nil: none by labels
	// text is how the token's reach is written, for a 403.
	text string
}

// newReach checks a token's cluster limits; nil (and no error) when there
// are none.
func newReach(clusters []string, selector string) (*reach, error) {
	if len(clusters) == 0 && selector == "" {
		return nil, nil
	}
	var errs []error
	r := &reach{}
	var parts []string
	for _, c := range clusters {
		if !manifest.IsDNSLabel(c) {
			errs = append(errs, fmt.Errorf("clusters: %q is not a cluster name (a DNS-1123 label)", c))
		}
		r.clusters = append(r.clusters, c)
	}
	if len(clusters) > 0 {
		parts = append(parts, "clusters "+strings.Join(clusters, ","))
	}
	if selector != "" {
		sel, err := labels.Parse(selector)
		if err != nil {
			errs = append(errs, fmt.Errorf("clusterSelector %q: %s", selector, strings.TrimPrefix(err.Error(), "unable to parse requirement: ")))
		}
		r.selector = sel
		parts = append(parts, "clusters labelled "+selector)
	}
	r.text = strings.Join(parts, " or ")
	return r, errors.Join(errs...)
}

// parseOptions reads a tokens file line's options after the name:
// clusters=a,b and clusterSelector=<selector>.
func (t *Token) parseOptions(opts []string) error {
	for _, o := range opts {
		k, v, ok := strings.Cut(o, "=")
		switch {
		case !ok || v == "":
			return fmt.Errorf("option %q: want clusters=<c>[,<c>...] or clusterSelector=<selector>", o)
		case k == "clusters" && t.Clusters == nil:
			t.Clusters = strings.Split(v, ",")
		case k == "clusterSelector" && t.ClusterSelector == "":
			t.ClusterSelector = v
		default:
			return fmt.Errorf("option %q: unknown or repeated (want clusters=... and clusterSelector=..., once each)", k)
		}
	}
	return nil
}

// authorizeIngest refuses (403, naming the cluster) a health event about a
// cluster outside the principal's reach, before anything is stored, and
// stamps every event with the principal's name (policy.ExtensionReporter,
// replacing whatever the sender set): the health-watcher records the
// reports as source ingest:<name> and judges them by the cluster's
// trusted sources.
func (s *server) authorizeIngest(ctx context.Context, p *principal, items []ingestItem) error {
	if p.reach != nil {
		labelsOf := map[string]labels.Set{}
		var bad *problemError
		for i, it := range items {
			cluster := it.cluster
			if cluster == "" {
				continue
			}
			ok, err := s.inReach(ctx, p.reach, cluster, labelsOf)
			if err != nil {
				return err
			}
			if ok {
				continue
			}
			if bad == nil {
				bad = problem(http.StatusForbidden, api.ProblemForbidden, "Forbidden",
					"%s may report health of %s only; nothing was stored", p.name, p.reach.text)
			}
			path := "data.cluster"
			if len(items) > 1 {
				path = "[" + strconv.Itoa(i) + "]." + path
			}
			bad.withField(path, "cluster "+cluster+" is outside the token's clusters", cluster)
		}
		if bad != nil {
			return bad
		}
	}
	for _, it := range items {
		it.e.SetExtension(policy.ExtensionReporter, p.name)
	}
	return nil
}

// inReach reports whether cluster is in r: named, or its labels (read
// once per request into labelsOf) match the selector. A cluster that does
// not exist matches no selector.
func (s *server) inReach(ctx context.Context, r *reach, cluster string, labelsOf map[string]labels.Set) (bool, error) {
	if slices.Contains(r.clusters, cluster) {
		return true, nil
	}
	if r.selector == nil {
		return false, nil
	}
	set, ok := labelsOf[cluster]
	if !ok {
		c, _, err := s.clusters.Get(ctx, keys.Cluster(cluster))
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return false, err
		}
		if err != nil {
			set = nil
		} else {
			set = labels.Set(c.GetMetadata().GetLabels())
		}
		labelsOf[cluster] = set
	}
	return set != nil && r.selector.Matches(set), nil
}
