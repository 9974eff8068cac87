"""The incident console: HTML pages with server-rendered SVG charts, served by the notifier's API
(:mod:`tailhound.notifier.webconsole.routes`) and written as one self-contained file by
``tailhound replay --html`` (:mod:`tailhound.notifier.webconsole.report`). Nothing is fetched from anywhere
at run time: styles, scripts and charts are inline.

- :mod:`.view`: what a page shows of an incident (:class:`~.view.IncidentView`), built from the notifier's
  state or from a replay's events;
- :mod:`.charts`: SVG timelines (each evidence signal against its baseline and threshold, the rule's ``for``
  window, the open/update/resolve marks) and the peer view (the hot GPU against the node's others, the slow
  node against the model's others);
- :mod:`.pages`: the incident list, the incident page and the silences page (:mod:`.assets`: their CSS and
  scripts; :mod:`.formatting`: escaping, numbers and times);
- :mod:`.report`: the offline report (the list, then every incident page, in one file);
- :mod:`.routes` and :mod:`.access`: the HTTP side (pages, the incidents JSON API, the silence preview, the
  browser login for reads off loopback).
"""
