package runcmd

import "syscall"

// sysProcAttr puts a command in its own process group (a timeout reaches
// what it started) and has the kernel SIGKILL it if the agent dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
