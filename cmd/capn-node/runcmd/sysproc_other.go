//go:build unix && !linux

package runcmd

import "syscall"

// sysProcAttr puts a command in its own process group. Only Linux has a
// parent-death signal.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
