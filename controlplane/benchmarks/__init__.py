"""Benchmarks: runs that measure what one replica of a shape sustains, and the capacity figures
they keep fresh."""
