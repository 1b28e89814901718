"""Timing on the GPU: CUDA-event timers, fused-vs-native comparison rounds, profiler kernel times, host
conditions, and the statistics and rules that turn rounds into a timing verdict."""
