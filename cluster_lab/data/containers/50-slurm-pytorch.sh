#!/bin/bash
# enroot's PyTorch hook, simulated by the cluster-tool lab as enroot ships it (off until enabled,
# as 50-slurm-pmi.sh): in an image that sets PYTORCH_VERSION (NGC's PyTorch images), the rendezvous
# settings torch.distributed reads come from the Slurm step, unless the image sets them already.
set -euo pipefail
grep -q '^PYTORCH_VERSION=' "$ENROOT_ENVIRON" || exit 0
add() {
    [ -n "$2" ] || return 0
    grep -q "^$1=" "$ENROOT_ENVIRON" || printf '%s=%s\n' "$1" "$2" >> "$ENROOT_ENVIRON"
}
first=""
if [ -n "${SLURM_STEP_NODELIST-}" ] && command -v scontrol > /dev/null; then
    first=$(scontrol show hostnames "$SLURM_STEP_NODELIST" | head -n 1)
fi
add MASTER_ADDR "$first"
add MASTER_PORT "$([ -n "${SLURM_JOB_ID-}" ] && echo $((SLURM_JOB_ID % 4536 + 61000)))"
add WORLD_SIZE "${SLURM_NTASKS-}"
add RANK "${SLURM_PROCID-}"
add LOCAL_RANK "${SLURM_LOCALID-}"
