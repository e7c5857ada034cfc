// Package hotpath holds the packet path to a budget: a fixed generated
// workload goes through the whole collector in process (correlation, the
// store, the rollups, events), and its CPU time and allocations are
// compared with a reference measured in the same run. It has only tests;
// see BENCHMARKS.md, "The hot path's budget".
package hotpath
