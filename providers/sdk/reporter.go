package sdk

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
)

// reporter is the Reporter a Runner gets.
type reporter struct{ s *server }

func (r reporter) Report(ctx context.Context, m *capnv1.InfraMachine) error {
	if m == nil {
		return errors.New("report: no machine")
	}
	c, name := m.GetCluster(), m.GetMachine()
	if err := errors.Join(ValidateName("cluster", c), ValidateName("machine", name)); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	im := proto.Clone(m).(*capnv1.InfraMachine)
	r.s.obs.normalise(im, c, name)
	if err := r.s.obs.writeMachine(ctx, im, true); err != nil {
		return fmt.Errorf("report %s/%s: %w", c, name, err)
	}
	return nil
}

func (r reporter) Recheck(cluster, machine string) {
	r.s.checks.Add(InfraKey(r.s.name, cluster, machine))
}
