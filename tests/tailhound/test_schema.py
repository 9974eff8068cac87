from __future__ import annotations

import json
from pathlib import Path

from tailhound.schema import WIRE_MODELS, render, stale_schemas, write_schemas

DOCS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def test_committed_schemas_match_the_models():
    assert stale_schemas(DOCS) == [], "run `tailhound schema` and commit docs/schemas/"


def test_schemas_are_valid_json_with_versions(tmp_path):
    written = write_schemas(tmp_path)
    assert {p.name for p in written} == set(WIRE_MODELS)
    for p in written:
        schema = json.loads(p.read_text())
        assert schema["$schema"].endswith("2020-12/schema")
        assert "schema_version" in schema["properties"]
    incident = json.loads(render(WIRE_MODELS["incident-event.schema.json"]))
    assert "gpu-thermal-throttle" in json.dumps(incident)


def test_stale_schema_is_detected(tmp_path):
    write_schemas(tmp_path)
    (tmp_path / "snapshot.schema.json").write_text("{}")
    assert [p.name for p in stale_schemas(tmp_path)] == ["snapshot.schema.json"]
