"""Side-by-side benchmarks of kdagen and flash-linear-attention (`kdagen bench`).

model: FLOPs and compulsory bytes per call; cases: ops, shapes and modes; inputs: FLA-style random
inputs; libraries: the two implementations (or why one is missing); timing: CUDA-event timings and
the machine's ceilings; accuracy: both libraries against the float64 reference; harness: a run as a
plain dict; report: markdown and comparisons; plot: the PNG.
"""
