"""A Typer app with one command registered the way `tailhound` registers it (tailhound/cli/)."""

from __future__ import annotations

from collections.abc import Callable

import typer


def app_with(register: Callable[[typer.Typer], None]) -> typer.Typer:
    a = typer.Typer()
    register(a)

    @a.callback()
    def _root() -> None:  # a group, so the command is called by its name as under `tailhound`
        pass

    return a
