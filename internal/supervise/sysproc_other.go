//go:build unix && !linux

package supervise

import "syscall"

// sysProcAttr puts a child in its own process group. Only Linux has a
// parent-death signal: elsewhere a kill -9 of the agent leaves the
// children running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
