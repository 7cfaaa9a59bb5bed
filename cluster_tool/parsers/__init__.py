"""Parsers: pure functions from one tool's text output to typed records.

Importing this package registers every parser kind for `cluster-tool parse`.
"""

# One import per parser module registers its kinds (keep sorted).
from cluster_tool.parsers import dcgmi as dcgmi
from cluster_tool.parsers import ibcounters as ibcounters
from cluster_tool.parsers import iblinkinfo as iblinkinfo
from cluster_tool.parsers import ibnetdiscover as ibnetdiscover
from cluster_tool.parsers import ibstat as ibstat
from cluster_tool.parsers import kernel_log as kernel_log
from cluster_tool.parsers import nccl_tests as nccl_tests
from cluster_tool.parsers import nvidia_query as nvidia_query
from cluster_tool.parsers import nvidia_smi as nvidia_smi
from cluster_tool.parsers import nvidia_topo as nvidia_topo
from cluster_tool.parsers import nvlink as nvlink
from cluster_tool.parsers.base import KINDS, ParseError, parser, to_jsonable

__all__ = ["KINDS", "ParseError", "parser", "to_jsonable"]
