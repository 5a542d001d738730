"""The workflow config's JSON schema, generated from the settings' definitions.

`carbon-vep config-schema` writes it to workflow/schemas/config.schema.yaml, which the
Snakefile validates every config with (a test keeps the file equal to what this writes).
"""

from __future__ import annotations

from typing import Any

from carbon_vep.config.entries import ENTRY_KEY, SECTIONS
from carbon_vep.config.fields import entry_schema, schema_property
from carbon_vep.config.run import (
    BASELINE_HELP,
    OUTDIR_DEFAULT,
    SHA256_HELP,
    SHA256_PATTERN,
    run_fields,
)
from carbon_vep.config.task_entry import TaskConfig
from carbon_vep.config.tasks import swept_settings


def json_schema() -> dict[str, Any]:
    """The workflow config's JSON schema (draft 2020-12), defaults included."""
    properties: dict[str, Any] = {
        "outdir": {"type": "string", "default": OUTDIR_DEFAULT, "description": "output folder"}
    }
    properties["baseline"] = {"type": ["string", "null"], "default": None}
    properties["baseline"]["description"] = BASELINE_HELP
    properties["sha256"] = {
        "type": "object",
        "default": {},
        "description": SHA256_HELP,
        "additionalProperties": {"type": "string", "pattern": SHA256_PATTERN},
    }
    for name, (f, hint) in run_fields().items():
        properties[name] = schema_property(f, hint)
    for name, (entry_cls, required, description) in SECTIONS.items():
        section: dict[str, Any] = {
            "type": "object",
            "description": description,
            "propertyNames": {"pattern": ENTRY_KEY},
            "additionalProperties": entry_schema(entry_cls, entry_sweeps(entry_cls)),
        }
        if required:
            section["minProperties"] = 1
        else:
            section["default"] = {}
        properties[name] = section
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "description": "carbon-vep workflow configuration (generated from carbon_vep.config: "
        "run `carbon-vep config-schema --out workflow/schemas/config.schema.yaml`)",
        "type": "object",
        "properties": properties,
        "required": [name for name, (_, required, _) in SECTIONS.items() if required],
        "additionalProperties": False,
    }


def entry_sweeps(entry_cls: type) -> set[str]:
    """The settings of a section's entries that also take a list (a task's sweeps)."""
    return swept_settings() if entry_cls is TaskConfig else set()


def schema_yaml() -> str:
    import yaml

    header = "# Generated from src/carbon_vep/config/ by `carbon-vep config-schema`; do not edit.\n"
    return header + yaml.safe_dump(json_schema(), sort_keys=False, width=100, allow_unicode=True)
