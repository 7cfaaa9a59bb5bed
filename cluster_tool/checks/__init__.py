"""Checks: pure functions from parsed records (and the spec) to findings.

`fabric` holds the discovered InfiniBand fabric to the cabling plan; `health` holds one node's
GPUs, HCAs and software to its profile; `affinity`, `gdr` and `nccl_env` are the smaller node
checks `health` runs alongside. None of them touches the network.
"""
