"""Drives the project's playbooks through ansible-runner and reads results from its events."""

from cluster_tool.ansible.runner import (
    HostStats,
    PlaybookEvent,
    PlaybookResult,
    default_private_data_dir,
    run_playbook,
)

__all__ = [
    "HostStats",
    "PlaybookEvent",
    "PlaybookResult",
    "default_private_data_dir",
    "run_playbook",
]
