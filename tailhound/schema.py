"""JSON Schema export of the wire models (``tailhound schema --out DIR``); the repository keeps them in
docs/schemas/ (``make docs``)."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel

from tailhound.deadletter import DeadLetter
from tailhound.incident import IncidentEvent
from tailhound.snapshot import Snapshot, SnapshotBundle

WIRE_MODELS: dict[str, type[BaseModel]] = {
    "snapshot.schema.json": Snapshot,
    "snapshot-bundle.schema.json": SnapshotBundle,
    "incident-event.schema.json": IncidentEvent,
    "deadletter.schema.json": DeadLetter,
}


def render(model: type[BaseModel]) -> str:
    schema = model.model_json_schema(mode="serialization")
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:tailhound:schema:{model.__name__}:v{model.model_fields['schema_version'].default}",
        **schema,
    }
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def write_schemas(out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, model in WIRE_MODELS.items():
        path = out_dir / name
        path.write_text(render(model), encoding="utf-8")
        written.append(path)
    return written


def stale_schemas(out_dir: Path) -> list[Path]:
    """Committed schema files that differ from the models (empty when all match)."""
    stale = []
    for name, model in WIRE_MODELS.items():
        path = out_dir / name
        if not path.is_file() or path.read_text(encoding="utf-8") != render(model):
            stale.append(path)
    return stale
