"""What several stage commands share: KEY=VALUE / JSON options, the result arguments of a
metrics command and its result file, a panel's recipe windows. (A job's model: model.job.)"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

import polars as pl

from carbon_vep import atomic
from carbon_vep.config.fields import ConfigError
from carbon_vep.config.stages import RecipeSettings
from carbon_vep.config.tasks import SWEEP_KEY
from carbon_vep.errors import InputError

log = logging.getLogger("carbon_vep")


def check_output_files(*paths: str | Path | None) -> None:
    """Refuse output file paths that cannot be written, before any work or any output: a path
    that is a directory, one under a regular file, one in a directory we may not write to.
    (A command writing several files checks them all first, so none is left without the
    others.)"""
    for path in paths:
        if path is None:
            continue
        final = Path(path)
        if final.is_dir():
            raise InputError(final, "is a directory; give the path of a file to write")
        parent = final.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if parent.exists() and not parent.is_dir():
            raise InputError(final, f"cannot be written: {parent} is a file, not a directory")
        if parent.is_dir() and not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(final, f"cannot be written: no permission to write in {parent}")


def add_no_index(p: argparse.ArgumentParser) -> None:
    """--no-index: a bgzipped output written without its tabix index, which the workflow writes
    in a job of its own (index-tabix) so that Snakemake stamps the declared index after it."""
    p.add_argument(
        "--no-index",
        action="store_true",
        help="write the file without its tabix index (then: carbon-vep index-tabix)",
    )


def pairs(items: list[str]) -> dict[str, Any]:
    """KEY=VALUE options, JSON objects, or @FILE (a JSON object in a file, as record-inputs
    writes), merged in order (`--provenance`, `--field`); mappings under the same key merge."""
    out: dict[str, Any] = {}
    for item in items:
        if item.lstrip().startswith("{") or item.startswith("@"):
            for key, value in _json_object(item).items():
                if isinstance(value, dict) and isinstance(out.get(key), dict):
                    value = out[key] | value
                out[key] = value
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"expected KEY=VALUE or a JSON object, got {item!r}")
        out[key] = value
    return out


def _json_object(item: str) -> dict[str, Any]:
    if item.startswith("@"):
        try:
            item = Path(item[1:]).read_text()
        except OSError as err:
            raise InputError(item[1:], f"cannot read: {err}") from err
    return json.loads(item)


def add_result_args(p: argparse.ArgumentParser, defaults: str | None = None) -> None:
    """The names a metrics JSON is filed under in the results table, and its provenance;
    required unless the command says what it defaults them to (`defaults`)."""
    task_help, key_help = "task / dataset name in the results table", "model name there"
    if defaults:
        task_help += f" (default: {defaults})"
        key_help += " (default: the model directory's or Hub id's last part)"
    p.add_argument("--task", required=not defaults, help=task_help)
    p.add_argument("--model-key", required=not defaults, help=key_help)
    p.add_argument("--provenance", action="append", default=[], help="KEY=VALUE or a JSON object")


def fill_result_names(args: argparse.Namespace, task: str, model_path: str) -> None:
    """The defaults `add_result_args(defaults=...)` promised: `task`, and the model key from
    the model directory's or Hub id's last part."""
    args.task = args.task or task
    args.model_key = args.model_key or Path(model_path.rstrip("/")).name


def write_task_result(result: dict, args: argparse.Namespace, headline: list[str]) -> None:
    """Name the result (task, model key, headline metrics, provenance), write it, log warnings.
    A sweep point's job gets its point in its provenance and files it under the parameters."""
    provenance = pairs(args.provenance)
    if SWEEP_KEY in provenance:
        result.setdefault("parameters", {})[SWEEP_KEY] = provenance.pop(SWEEP_KEY)
    result.update(
        task=args.task,
        model_key=args.model_key,
        headline_metrics=headline,
        provenance=provenance,
    )
    atomic.write_json(result, args.metrics_out)
    for warning in result["warnings"]:
        log.warning(warning)


def recipe_windows(checked: pl.DataFrame, reference, recipe: RecipeSettings) -> pl.DataFrame:
    """The scoreable variants of a checked panel with their recipe's windows."""
    from carbon_vep.genome.windows import unique_variants

    variants = unique_variants(checked)
    return recipe.definition.add_windows(variants, reference.lengths, recipe.window_bp)
