package sdk

import (
	"context"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events/store"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// Alive reports whether an announcement read at now says its provider is
// running: its time is at most AnnouncementStale old. A provider that
// stopped cleanly has no announcement at all; one that crashed leaves a
// stale one.
func Alive(a *capnv1.ProviderAnnouncement, now time.Time) bool {
	return a != nil && a.GetTime() != nil && now.Sub(a.GetTime().AsTime()) <= AnnouncementStale
}

// announce writes (or refreshes) provider.<name> with the current time.
func (s *server) announce(ctx context.Context) error {
	a := &capnv1.ProviderAnnouncement{
		Name:         s.name,
		Version:      s.opts.Version,
		Capabilities: s.capabilities(),
		Time:         timestamppb.New(s.obs.now()),
		Instance:     s.opts.Instance,
	}
	if kv, ok := s.p.(KubernetesVersioner); ok {
		a.KubernetesVersions = kv.KubernetesVersions()
	}
	if o, ok := s.p.(OperatingSystemer); ok {
		a.OperatingSystems = o.OperatingSystems()
	}
	_, _, err := s.obs.announcements.Mutate(ctx, AnnouncementKey(s.name), func(*capnv1.ProviderAnnouncement, bool) (*capnv1.ProviderAnnouncement, error) {
		return a, nil
	})
	return err
}

// capabilities are the provider's, with CapabilityNodeAgent for a
// NodeAgentProvider.
func (s *server) capabilities() []string {
	caps := s.p.Capabilities()
	if _, ok := s.p.(NodeAgentProvider); ok && !slices.Contains(caps, CapabilityNodeAgent) {
		caps = append(slices.Clone(caps), CapabilityNodeAgent)
	}
	return caps
}

// keepAnnouncing refreshes the announcement every AnnounceEvery until ctx
// ends. A failed refresh is logged and tried again at the next tick.
func (s *server) keepAnnouncing(ctx context.Context) {
	t := time.NewTicker(s.opts.AnnounceEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.announce(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Msg("cannot refresh the announcement")
			}
		}
	}
}

// unannounce deletes provider.<name> if this instance wrote it last.
func (s *server) unannounce(ctx context.Context) error {
	_, _, err := s.obs.announcements.Mutate(ctx, AnnouncementKey(s.name), func(cur *capnv1.ProviderAnnouncement, exists bool) (*capnv1.ProviderAnnouncement, error) {
		if !exists || cur.GetInstance() != s.opts.Instance {
			return nil, store.ErrNoChange
		}
		return nil, store.ErrDelete
	})
	return err
}
