"""Ahead-of-time compilation for a TPU slice on a machine without TPUs:
the chips' figures (chips.py), the compile-only devices of a topology
(topology.py) and what the compiled step says about itself (analysis.py).
The command is recipes/compile.py."""
