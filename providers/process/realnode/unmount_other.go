//go:build !linux

package realnode

import "errors"

// unmountUnder: real nodes are Linux only.
func unmountUnder(string) error { return errors.New("real nodes need Linux") }
