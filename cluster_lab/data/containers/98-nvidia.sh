#!/bin/bash
# enroot's GPU pre-start hook (hooks.d/98-nvidia.sh), simulated by the cluster-tool lab as enroot
# documents it (doc/standard-hooks.md): a container whose environment sets NVIDIA_VISIBLE_DEVICES
# (as NGC images do) gets its GPUs and the driver's utilities from nvidia-container-cli
# (libnvidia-container-tools). Without that command the container does not start.
set -euo pipefail

# The container's NVIDIA_* settings, from its environment file.
while IFS= read -r var; do
    [[ "$var" =~ ^NVIDIA_[A-Z_]*= ]] && export "${var?}"
done < "$ENROOT_ENVIRON"

if [ "${NVIDIA_VISIBLE_DEVICES:-void}" = void ]; then
    exit 0
fi
if ! command -v nvidia-container-cli > /dev/null; then
    echo "[ERROR] Command not found: nvidia-container-cli, see https://github.com/NVIDIA/libnvidia-container" >&2
    exit 1
fi
cli_args=(--no-cgroups)
if [ "$NVIDIA_VISIBLE_DEVICES" != none ]; then
    cli_args+=("--device=$NVIDIA_VISIBLE_DEVICES")
fi
caps="${NVIDIA_DRIVER_CAPABILITIES:-utility}"
[ "$caps" = all ] && caps=compute,utility,video,graphics,display
IFS=, read -r -a wanted <<< "$caps"
for cap in "${wanted[@]}"; do
    cli_args+=("--$cap")
done
exec nvidia-container-cli --user configure "${cli_args[@]}" "$ENROOT_ROOTFS"
