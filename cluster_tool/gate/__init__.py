"""The nccl-tests gate: a ladder of Slurm jobs, thresholds from the hardware, the bad node named."""
