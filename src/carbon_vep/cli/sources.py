"""Inputs, on the head node or anywhere: fetch-hub and fetch-url (public data files),
fetch-model (a Hub model into the offline cache), build-demo-model, record-inputs (the sha256
of every input) and config-schema (the workflow's schema, from the settings)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from carbon_vep import atomic
from carbon_vep.cli.common import log
from carbon_vep.config.entries import DownloadConfig, HubFileConfig
from carbon_vep.config.fields import add_flags, from_args
from carbon_vep.config.stages import ModelSettings


def add_fetch_hub(sub) -> None:
    p = sub.add_parser("fetch-hub", help="download a public dataset file from the Hub")
    add_flags(p, HubFileConfig)
    p.set_defaults(func=fetch_hub)


def fetch_hub(args: argparse.Namespace) -> None:
    from carbon_vep.sources.download import fetch_hub_file
    from carbon_vep.sources.hub import is_pinned

    (hub,) = from_args(args, HubFileConfig)
    fetched = fetch_hub_file(hub.repo_id, hub.filename, hub.out, hub.revision, hub.repo_type)
    log.info("%s@%s: %s -> %s", hub.repo_id, fetched["commit"], fetched["files"], hub.out)
    if not is_pinned(hub.revision):
        log.warning(
            "%s: revision %s is not a commit; it resolved to %s: set `revision: %s` so every "
            "run reads the same file",
            hub.repo_id,
            hub.revision or "main",
            fetched["commit"],
            fetched["commit"],
        )


def add_fetch_url(sub) -> None:
    p = sub.add_parser("fetch-url", help="download a public file from a pinned URL (sha256)")
    add_flags(p, DownloadConfig)
    p.set_defaults(func=fetch_url)


def fetch_url(args: argparse.Namespace) -> None:
    from carbon_vep.sources.download import fetch_url

    (download,) = from_args(args, DownloadConfig)
    digest = fetch_url(download.url, download.out, download.sha256, download.gunzip)
    log.info("%s: sha256 %s verified, written to %s", download.url, digest, download.out)


def add_fetch_model(sub) -> None:
    p = sub.add_parser(
        "fetch-model", help="download a Hub model and its remote code into the local Hub cache"
    )
    add_flags(p, ModelSettings)
    p.add_argument("--out", required=True, help="JSON record of what was fetched")
    p.set_defaults(func=fetch_model)


def fetch_model(args: argparse.Namespace) -> None:
    from carbon_vep.sources.hub import check_remote_code, fetch_snapshot, is_local_model

    (model,) = from_args(args, ModelSettings)
    if is_local_model(model.path):
        fetched = {"model": model.path, "local_directory": True}
    else:
        fetched = fetch_snapshot(model.path, model.revision)
        check_remote_code(model, Path(fetched["snapshot"]), from_hub=True)
        if model.revision is None:
            log.warning(
                "%s: no revision pinned, fetched commit %s of main; set `revision: %s` in the "
                "config so every run scores with the same weights",
                model.path,
                fetched["commit"],
                fetched["commit"],
            )
    atomic.write_json(fetched, args.out)
    log.info("model ready for offline jobs: %s", fetched)


def add_build_demo_model(sub) -> None:
    p = sub.add_parser("build-demo-model", help="build the tiny Carbon-shaped demo model")
    p.add_argument("--out", required=True)
    p.set_defaults(func=build_demo_model)


def build_demo_model(args: argparse.Namespace) -> None:
    from carbon_vep.model.demo import build_demo_model

    build_demo_model(args.out)


def add_record_inputs(sub) -> None:
    p = sub.add_parser(
        "record-inputs",
        help="hash input files (or a model's files) into a provenance record; stop on a pin "
        "mismatch",
    )
    p.add_argument("--file", action="append", default=[], help="an input file (repeatable)")
    p.add_argument("--model", help="a model directory or Hub id: hash every file of it")
    p.add_argument("--revision", help="the Hub model's revision (its cached snapshot)")
    p.add_argument("--pins", help='JSON {"PATH": "SHA256"}: expected hashes (config `sha256:`)')
    p.add_argument("--out", required=True)
    p.set_defaults(func=record_inputs)


def record_inputs(args: argparse.Namespace) -> None:
    from carbon_vep.sources.inputs import record_files, record_model

    pins = json.loads(args.pins) if args.pins else {}
    if args.model:
        record = record_model(args.model, args.revision, pins)
    else:
        record = record_files(args.file, pins)
    for name, digest in record["inputs_sha256"].items():
        log.info("%s  %s", digest, name)
    atomic.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", args.out)


def add_config_schema(sub) -> None:
    p = sub.add_parser("config-schema", help="write the workflow's config schema (from config/)")
    p.add_argument("--out", required=True)
    p.set_defaults(func=config_schema)


def config_schema(args: argparse.Namespace) -> None:
    from carbon_vep.config.schema import schema_yaml

    atomic.write_text(schema_yaml(), args.out)


COMMANDS = (
    add_fetch_hub,
    add_fetch_url,
    add_fetch_model,
    add_build_demo_model,
    add_record_inputs,
    add_config_schema,
)
