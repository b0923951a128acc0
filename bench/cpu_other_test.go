//go:build !unix

package benchmarks

import "time"

// processCPU is not measured on this platform: cli-µs/op reports 0.
func processCPU() time.Duration { return 0 }
