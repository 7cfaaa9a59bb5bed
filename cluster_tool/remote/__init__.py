"""Read-only fan-out: one SSH session per node carrying every probe; captures saved and replayed."""
