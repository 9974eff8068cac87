"""The ``tailhound`` command line: one module per command group, registered on :data:`common.app` in help order."""

from __future__ import annotations

import sys

from tailhound.errors import TailhoundError

from .common import app, err_console


def _add_notifier_commands() -> None:
    from tailhound.notifier.cli import incidents_app, notifier_app, silence_app

    app.add_typer(notifier_app, name="notifier")
    app.add_typer(silence_app, name="silence")
    app.add_typer(incidents_app, name="incidents")


_add_notifier_commands()

# registration order is the order `tailhound --help` lists the commands in
from . import processes  # noqa: E402, F401, I001
from . import replay  # noqa: E402, F401
from . import explain  # noqa: E402, F401
from . import reference  # noqa: E402, F401
from . import rules  # noqa: E402, F401
from . import baseline  # noqa: E402, F401
from . import doctor  # noqa: E402, F401


def _add_capacity_commands() -> None:
    """`tailhound loadtest` and `tailhound capacity` (tailhound/capacity/: locust and matplotlib load lazily)."""
    from tailhound.capacity import capacity_cli, loadtest_cli

    loadtest_cli.register(app)
    capacity_cli.register(app)


_add_capacity_commands()


def _add_ingest_command() -> None:
    """`tailhound ingest` (tailhound/cli/ingest.py): Prometheus remote write and federation in."""
    from . import ingest
    from .common import settings_from

    ingest.register(app, lambda: settings_from(None))


_add_ingest_command()

from . import check  # noqa: E402, F401 - registered last, as `tailhound --help` lists it


def main() -> None:
    """Run the command line; a TailhoundError is one red line and exit status 2."""
    try:
        app()
    except TailhoundError as exc:
        from rich.markup import escape

        # escaped: a message's "[fit]" or "[0]" is text, not a style tag
        err_console.print(f"[red]error:[/] {escape(str(exc))}", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("interrupted; everything stopped")
        sys.exit(130)


__all__ = ["app", "main"]
