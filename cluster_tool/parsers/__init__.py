"""Parsers: pure functions from one tool's text output to typed records.

Importing this package registers every parser kind for `cluster-tool parse`.
"""

from cluster_tool.parsers.base import KINDS, ParseError, parser, to_jsonable

# One import per parser module registers its kinds (keep sorted).

__all__ = ["KINDS", "ParseError", "parser", "to_jsonable"]
