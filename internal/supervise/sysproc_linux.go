package supervise

import "syscall"

// sysProcAttr puts a child in its own process group (so a stop reaches its
// own children) and has the kernel SIGKILL it when the thread that started
// it dies — with the agent, even by kill -9. Go never ends a thread it
// did not lock, and the supervisor starts children from plain goroutines,
// so that thread lives as long as the agent.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
