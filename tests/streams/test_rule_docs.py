from __future__ import annotations

from pathlib import Path

from tailhound.streams.ruleset.docs import render_root_causes
from tailhound.streams.ruleset.rulefile import load_rules
from tailhound.vocabulary import RootCause

ROOT = Path(__file__).resolve().parents[2]


def test_root_causes_doc_is_up_to_date():
    text = render_root_causes(load_rules(ROOT / "rules"))
    assert (ROOT / "docs" / "root-causes.md").read_text(encoding="utf-8") == text, "run `tailhound rules doc`"
    for cause in RootCause:
        assert f"`{cause.value}`" in text
