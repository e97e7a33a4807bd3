package autoscalerprovider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/schemas/externalgrpc"
	"github.com/capn-dev/capn/schemas/keys"
	"github.com/capn-dev/capn/secrets/autoscalertls"
)

// api is the externalgrpc CloudProvider service. Every call acts on the
// caller's cluster only: the one its client certificate names.
type api struct {
	externalgrpc.UnimplementedCloudProviderServer
	s *Service
}

// GPULabel is the label a GPU node of a capn cluster would carry; capn
// makes none (GetAvailableGPUTypes is empty).
const GPULabel = "capn.dev/gpu"

type clusterKey struct{}

// callerCluster is the cluster of the call (intercept put it in ctx).
func callerCluster(ctx context.Context) string { c, _ := ctx.Value(clusterKey{}).(string); return c }

// intercept authenticates every call — the verified client certificate
// names the cluster it may act on — then logs, counts and turns errors into
// gRPC statuses.
func (s *Service) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
	cluster, err := identify(ctx)
	if err != nil {
		s.metrics.requests.WithLabelValues(method, codes.Unauthenticated.String()).Inc()
		s.log.Warn().Err(err).Str("method", method).Msg("autoscaler call refused")
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	log := s.log.With().Str("cluster", cluster).Str("method", method).Logger()
	ctx = log.WithContext(context.WithValue(ctx, clusterKey{}, cluster))
	resp, err := handler(ctx, req)
	err = toStatus(err)
	code := status.Code(err)
	s.metrics.requests.WithLabelValues(method, code.String()).Inc()
	if err != nil {
		log.Info().Err(err).Msg("autoscaler call failed")
	} else {
		log.Debug().Msg("autoscaler call")
	}
	return resp, err
}

// identify is the cluster the caller's verified client certificate names.
func identify(ctx context.Context) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", errors.New("no peer")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return "", errors.New("no verified client certificate")
	}
	return autoscalertls.ClusterOf(ti.State.VerifiedChains[0][0])
}

// apiError is an error with its gRPC code.
type apiError struct {
	code codes.Code
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func notFound(f string, a ...any) error { return &apiError{codes.NotFound, fmt.Sprintf(f, a...)} }
func invalidArgument(f string, a ...any) error {
	return &apiError{codes.InvalidArgument, fmt.Sprintf(f, a...)}
}
func failedPrecondition(f string, a ...any) error {
	return &apiError{codes.FailedPrecondition, fmt.Sprintf(f, a...)}
}
func unavailable(f string, a ...any) error { return &apiError{codes.Unavailable, fmt.Sprintf(f, a...)} }

// noGroup says why pool is no node group of c.
func noGroup(c *capnv1.Cluster, pool string) error {
	name := c.GetMetadata().GetName()
	if !scalable(c) {
		return failedPrecondition("cluster %s is deleting, paused or hibernated: its pools are not autoscaled now", name)
	}
	return notFound("cluster %s has no autoscaled pool %s", name, pool)
}

// toStatus is err as a gRPC status: an apiError's code and message, a
// deadline or cancellation as such, anything else Internal.
func toStatus(err error) error {
	var ae *apiError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return status.Error(ae.code, ae.msg)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, store.ErrConflict):
		return status.Error(codes.Aborted, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

// cluster reads the caller's desired cluster (nil when there is none).
func (a *api) cluster(ctx context.Context) (*capnv1.Cluster, error) {
	c, _, err := a.s.clusters.Get(ctx, keys.Cluster(callerCluster(ctx)))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return c, err
}

// pool is the caller's autoscaled pool id.
func (a *api) pool(ctx context.Context, id string) (*capnv1.WorkerPool, error) {
	c, err := a.cluster(ctx)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, notFound("cluster %s does not exist", callerCluster(ctx))
	}
	p, ok := autoscaledPool(c, id)
	if !ok {
		return nil, noGroup(c, id)
	}
	return p, nil
}

func (a *api) NodeGroups(ctx context.Context, _ *externalgrpc.NodeGroupsRequest) (*externalgrpc.NodeGroupsResponse, error) {
	c, err := a.cluster(ctx)
	if err != nil {
		return nil, err
	}
	return &externalgrpc.NodeGroupsResponse{NodeGroups: groupsOf(c)}, nil
}

func (a *api) NodeGroupForNode(ctx context.Context, req *externalgrpc.NodeGroupForNodeRequest) (*externalgrpc.NodeGroupForNodeResponse, error) {
	none := &externalgrpc.NodeGroupForNodeResponse{NodeGroup: &externalgrpc.NodeGroup{}}
	c, err := a.cluster(ctx)
	if err != nil || c == nil {
		return none, err
	}
	cluster := callerCluster(ctx)
	ms, err := a.s.clusterMembers(ctx, cluster)
	if err != nil {
		return nil, err
	}
	m, ok := findMember(cluster, ms, req.GetNode().GetProviderID(), req.GetNode().GetName())
	if !ok {
		return none, nil
	}
	for _, p := range c.GetSpec().GetWorkerPools() {
		if p.GetName() == m.desired.GetSpec().GetPool() && scalable(c) {
			if g := groupOf(c, p); g != nil {
				return &externalgrpc.NodeGroupForNodeResponse{NodeGroup: g}, nil
			}
		}
	}
	return none, nil
}

func (a *api) NodeGroupTargetSize(ctx context.Context, req *externalgrpc.NodeGroupTargetSizeRequest) (*externalgrpc.NodeGroupTargetSizeResponse, error) {
	p, err := a.pool(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	return &externalgrpc.NodeGroupTargetSizeResponse{TargetSize: p.GetReplicas()}, nil
}

func (a *api) NodeGroupIncreaseSize(ctx context.Context, req *externalgrpc.NodeGroupIncreaseSizeRequest) (*externalgrpc.NodeGroupIncreaseSizeResponse, error) {
	if err := a.s.increase(ctx, callerCluster(ctx), req.GetId(), req.GetDelta()); err != nil {
		return nil, err
	}
	return &externalgrpc.NodeGroupIncreaseSizeResponse{}, nil
}

func (a *api) NodeGroupDeleteNodes(ctx context.Context, req *externalgrpc.NodeGroupDeleteNodesRequest) (*externalgrpc.NodeGroupDeleteNodesResponse, error) {
	if err := a.s.deleteNodes(ctx, callerCluster(ctx), req.GetId(), req.GetNodes()); err != nil {
		return nil, err
	}
	return &externalgrpc.NodeGroupDeleteNodesResponse{}, nil
}

func (a *api) NodeGroupDecreaseTargetSize(ctx context.Context, req *externalgrpc.NodeGroupDecreaseTargetSizeRequest) (*externalgrpc.NodeGroupDecreaseTargetSizeResponse, error) {
	if err := a.s.decrease(ctx, callerCluster(ctx), req.GetId(), req.GetDelta()); err != nil {
		return nil, err
	}
	return &externalgrpc.NodeGroupDecreaseTargetSizeResponse{}, nil
}

func (a *api) NodeGroupNodes(ctx context.Context, req *externalgrpc.NodeGroupNodesRequest) (*externalgrpc.NodeGroupNodesResponse, error) {
	if _, err := a.pool(ctx, req.GetId()); err != nil {
		return nil, err
	}
	cluster := callerCluster(ctx)
	ms, err := a.s.poolMembers(ctx, cluster, req.GetId())
	if err != nil {
		return nil, err
	}
	out := &externalgrpc.NodeGroupNodesResponse{}
	for _, m := range ms {
		if m.deleting() && m.status.GetPhaseValue() == capnv1.MachineDeleted {
			continue // gone: only its record is left
		}
		out.Instances = append(out.Instances, instance(cluster, m))
	}
	return out, nil
}

func (a *api) NodeGroupTemplateNodeInfo(ctx context.Context, req *externalgrpc.NodeGroupTemplateNodeInfoRequest) (*externalgrpc.NodeGroupTemplateNodeInfoResponse, error) {
	p, err := a.pool(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	n, err := templateNode(callerCluster(ctx), p)
	if err != nil {
		return nil, failedPrecondition("%v", err)
	}
	b, err := n.Marshal()
	if err != nil {
		return nil, err
	}
	return &externalgrpc.NodeGroupTemplateNodeInfoResponse{NodeBytes: b}, nil
}

func (a *api) GPULabel(context.Context, *externalgrpc.GPULabelRequest) (*externalgrpc.GPULabelResponse, error) {
	return &externalgrpc.GPULabelResponse{Label: GPULabel}, nil
}

func (a *api) GetAvailableGPUTypes(context.Context, *externalgrpc.GetAvailableGPUTypesRequest) (*externalgrpc.GetAvailableGPUTypesResponse, error) {
	return &externalgrpc.GetAvailableGPUTypesResponse{}, nil
}

func (a *api) Refresh(context.Context, *externalgrpc.RefreshRequest) (*externalgrpc.RefreshResponse, error) {
	return &externalgrpc.RefreshResponse{}, nil
}

func (a *api) Cleanup(context.Context, *externalgrpc.CleanupRequest) (*externalgrpc.CleanupResponse, error) {
	return &externalgrpc.CleanupResponse{}, nil
}

// PricingNodePrice, PricingPodPrice and NodeGroupGetOptions are optional:
// the embedded UnimplementedCloudProviderServer answers Unimplemented, which
// the autoscaler takes as "not implemented" (no price-based expander; the
// global options for every group).
