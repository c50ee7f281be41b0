"""hawkes: spatiotemporal Hawkes process models for a million events, on GPUs and Slurm."""

__version__ = "0.1.0"
