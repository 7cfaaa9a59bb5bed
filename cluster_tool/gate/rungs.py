"""The gate's rung names, apart from the ladder: the CLI declares `--rungs` with them without
importing the ladder (and the findings, the Slurm runner and pydantic behind it)."""

RUNG_NAMES = ("single", "pairs", "full")
