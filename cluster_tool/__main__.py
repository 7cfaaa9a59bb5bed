"""`python -m cluster_tool` is the same as the `cluster-tool` command."""

import sys

from cluster_tool.cli import main

sys.exit(main())
