//go:build unix

package benchmarks

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user+system) this process has used so
// far. Its delta over a benchmark divided by b.N is the client's cost of
// one operation, goroutine scheduling and syscalls included.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
