#!/bin/bash
# enroot's PMI hook, simulated by the cluster-tool lab as enroot ships it: in
# /usr/share/enroot/hooks.d, off until an administrator copies it into /etc/enroot/hooks.d (pyxis'
# Setup page). In a Slurm job step it writes the step's SLURM_* settings, and its PMIX_* and PMI_*
# ones, into the container's environment, so a rank inside finds its PMIx server.
set -euo pipefail
if [ -z "${SLURM_JOB_ID-}" ] || [ -z "${SLURM_STEP_ID-}" ]; then
    exit 0
fi
while IFS= read -r name; do
    case "$name" in
        SLURM_* | PMIX_* | PMI_*) printf '%s=%s\n' "$name" "${!name}" >> "$ENROOT_ENVIRON" ;;
    esac
done < <(compgen -e)
