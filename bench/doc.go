// Package benchmarks contains only benchmarks comparing dogpile to its peers.
//
// It is a separate module, so that the peers never appear in dogpile's own
// go.mod. Run it with ./run.sh, which prints the ratios between dogpile and
// each peer measured in the same run; see README.md.
package benchmarks
