package docker

import (
	"context"
	"errors"

	"github.com/capn-dev/capn/providers/docker/engine"
)

// Purge removes every container and network of opts' deployment (and
// only those: they carry its capn.dev/deployment label): what a test's
// cleanup, or an operator abandoning a deployment, runs.
func Purge(ctx context.Context, opts Options) error {
	opts = opts.withDefaults()
	api, err := engine.New(opts.Host)
	if err != nil {
		return err
	}
	defer api.Close()
	n := names{opts.Deployment}
	var errs []error
	ctrs, err := api.ContainerList(ctx, n.labels("", "", ""))
	errs = append(errs, err)
	for _, c := range ctrs {
		if err := api.ContainerRemove(ctx, c.ID, true); err != nil && !errors.Is(err, engine.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	nets, err := api.NetworkList(ctx, n.labels("", "", ""))
	errs = append(errs, err)
	for _, nw := range nets {
		if err := api.NetworkRemove(ctx, nw.ID); err != nil && !errors.Is(err, engine.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
