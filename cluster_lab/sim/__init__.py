"""Device simulators of the lab: what `nvidia-smi`, `dcgmi`, the nccl-tests binaries, the kernel
log and `/sys/class/infiniband` show inside a lab node, rendered from the lab's hardware model.

Every module here but `packages` is stdlib only and uses relative imports: the simulator
packages carry a copy of them into the nodes, which have python3 and nothing else.
"""
