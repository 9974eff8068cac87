"""The notifier: incident lifecycle events in, one page per real incident out.

Where things are:
- :mod:`tailhound.notifier.model` - what a receiver is handed (:class:`~tailhound.notifier.model.Notification`)
  and what it hands back (a receipt it gets again on the next send for the same group);
- :mod:`tailhound.notifier.receivers` - one small file per integration (Slack, PagerDuty, webhooks, Kafka
  incident topic, console), each with its config model beside it;
- :mod:`tailhound.notifier.secrets` - tokens, routing keys and signing secrets come from env or files only;
- :mod:`tailhound.notifier.receivers.outbound` - where receivers may send (the host allow-list);
- :mod:`tailhound.notifier.limits` - what users can make the notifier hold and match (silences, the API).
"""

if __name__ != "tailhound.notifier":  # the folder is mapped into the namespace (pyproject.toml, package-dir)
    raise ImportError(f"import tailhound.notifier, not {__name__}: this folder is the tailhound.notifier package")
