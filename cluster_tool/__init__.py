"""cluster-tool: racked NVIDIA H100/H200 servers to a validated Slurm cluster."""

__version__ = "0.1.0"
