"""Command help that ends with a registry's listing (parser kinds, lab faults), built when the
help is read: declaring the command then does not import what fills the registry."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from typer.core import TyperCommand


def help_with_listing(listing: Callable[[], str]) -> type[TyperCommand]:
    """A command class whose help is the command's own help, a blank line, then `listing()`.

    Give the command a `short_help` too: a group's command list reads it instead of the help.
    """

    class ListingCommand(TyperCommand):
        _own_help = ""

        @property
        def help(self) -> str | None:
            return inspect.cleandoc(f"{self._own_help}\n\n{listing()}")

        @help.setter
        def help(self, value: str | None) -> None:
            self._own_help = value or ""

    return ListingCommand
