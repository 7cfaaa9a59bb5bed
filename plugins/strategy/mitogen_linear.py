"""Mitogen's linear strategy, which ansible.cfg selects, found through the pinned `mitogen`
package rather than a path into one virtual environment's site-packages.

Mitogen keeps one Python interpreter per node for the whole run and serves it the modules
from the controller, instead of starting a Python per task that unpacks and recompiles the
module from an AnsiballZ zip: on a converged cluster that per-task start is most of a run.
`ANSIBLE_STRATEGY=linear` goes back to stock Ansible for one run.
"""

from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule

__all__ = ["StrategyModule"]
