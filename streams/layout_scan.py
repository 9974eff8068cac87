"""The catalog mapping of a version-3 layout, worked out once: what :func:`snapshot_values` finds in a sample
depends only on its kind, name and labels (and the part's common labels), which a layout fixes for every
snapshot that references it; only the values change. A plan lists, per signal, which sample gives which
entity at which scale, so a snapshot's scan reads values by index instead of resolving each of ~170 samples.

Layouts are told apart by their common labels' dict: the decoder builds it once per layout read in full and
every snapshot of that layout shares it (:mod:`tailhound.wire.v3_decode`). A plan is built on a layout's second
snapshot (a part sent without a layout id decodes into a new dict each time: it would never be used again),
holds that dict (so its id is not reused while the plan lives), and is kept with the catalog it was built
against; at most :data:`MAX_PLANS`, the oldest go first (the bound of the decoder's own layout cache).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from tailhound.catalog import Catalog
    from tailhound.wire.decoded import DecodedSnapshot

#: plans kept per catalog (the decoder keeps as many layouts: tailhound.wire.v3_decode.LayoutCache)
MAX_PLANS = 32_768
#: interned plan items, shared by the layouts of every node (the same GPU indices, the same metrics)
MAX_ITEMS = 65_536


class LayoutPlan(NamedTuple):
    """What a layout's snapshots give :func:`tailhound.streams.snapshot_scan.snapshot_values`."""

    #: the layout's common labels (held: the key is its id)
    labels: dict
    #: samples in the layout
    n: int
    #: (signal, ((sample index, entity, scale), ...)) per gauge signal, in the order of first appearance
    gauges: tuple
    #: (sample index, rate signal, entity, scale) per mapped counter sample, in sample order
    counters: tuple
    #: indices of the histogram samples
    histograms: tuple
    #: (model, engine) pairs of the samples that name a model (what every snapshot of the layout finds)
    models: tuple


def plan_of(snapshot: DecodedSnapshot, catalog: Catalog, build) -> LayoutPlan | None:
    """The plan of `snapshot`'s layout (None on its first sight); `build(snapshot)` makes one:
    ``(gauges, counters, histograms, models)`` with items as :class:`LayoutPlan` lists them."""
    plans = catalog.memo.get("layout-plans")
    if plans is None:
        plans = catalog.memo.setdefault("layout-plans", {})
    labels = snapshot.labels
    key = id(labels)
    found = plans.get(key)
    if found is not None and found[0] is labels:
        if found.__class__ is LayoutPlan:
            return found if found.n == len(snapshot.samples) else None
        # second sight of the layout: worth a plan
        plan = plans[key] = LayoutPlan(labels, len(snapshot.samples), *_interned(catalog, build(snapshot)))
        return plan
    if len(plans) >= MAX_PLANS:
        del plans[next(iter(plans))]  # the oldest first
    plans[key] = (labels,)  # seen once
    return None


def _interned(catalog: Catalog, parts: tuple) -> tuple:
    """`parts` with each item replaced by an equal one already held (layouts of different nodes share them)."""
    items = catalog.memo.get("layout-plan-items")
    if items is None:
        items = catalog.memo.setdefault("layout-plan-items", {})

    def one(item):
        try:
            got = items.get(item)
        except TypeError:  # (not hashable: kept as it is)
            return item
        if got is None:
            if len(items) >= MAX_ITEMS:
                return item
            got = items[item] = item
        return got

    gauges, counters, histograms, models = parts
    return (
        tuple((name, tuple(map(one, members))) for name, members in gauges),
        tuple(map(one, counters)),
        tuple(histograms),
        tuple(models),
    )
