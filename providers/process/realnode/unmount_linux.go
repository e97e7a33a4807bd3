package realnode

import (
	"errors"
	"fmt"
	"syscall"
)

// unmountUnder unmounts whatever of dir is still mounted on the host,
// deepest first.
func unmountUnder(dir string) error {
	var errs []error
	m := mountsUnder(dir)
	for i := len(m) - 1; i >= 0; i-- {
		if err := syscall.Unmount(m[i], syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m[i], err))
		}
	}
	return errors.Join(errs...)
}
