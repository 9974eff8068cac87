"""``tailhound notifier run|check|routes test``, ``tailhound silence add|list|expire``,
``tailhound incidents list|show``: one module per command, registered on the apps of :mod:`.common`.
"""

from __future__ import annotations

from .common import incidents_app, notifier_app, silence_app

# registration order is the order `--help` lists the commands in
# isort: off
from . import notifier_run  # noqa: F401
from . import notifier_check  # noqa: F401
from . import routes_test  # noqa: F401
from . import silence_add  # noqa: F401
from . import silence_list  # noqa: F401
from . import silence_expire  # noqa: F401
from . import incidents_list  # noqa: F401
from . import incidents_show  # noqa: F401
# isort: on

__all__ = ["incidents_app", "notifier_app", "silence_app"]
