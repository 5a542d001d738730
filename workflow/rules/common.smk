import functools
import hashlib
import json
import os
import shlex
import sys

from snakemake.utils import validate

from carbon_vep.config.run import RunConfig
from carbon_vep.config.workflow import (
    MODEL_RULES,
    check_gpu_profile,
    check_niah_profile,
    niah_runtime_minutes,
    profile_gpu_class,
)
from carbon_vep.config.fields import INTERFACE_VARIABLE, spec_json
from carbon_vep.report.track_list import track_set

# The schema is generated from carbon_vep.config.schema (`carbon-vep config-schema`); RunConfig is the
# same config typed, every default filled in, builds and model keys checked.
os.environ[INTERFACE_VARIABLE] = "workflow"  # errors name config keys, not CLI flags
validate(config, schema="../schemas/config.schema.yaml")
RUN = RunConfig.from_dict(config)
for rule_name in MODEL_RULES:
    profile = workflow.resource_settings.overwrite_resources.get(rule_name, {})
    check_gpu_profile(rule_name, {k: v.raw for k, v in profile.items()}, RUN.models)
NIAH_PROFILE = {
    k: v.raw
    for k, v in workflow.resource_settings.overwrite_resources.get(
        "score_niah", {}
    ).items()
}
check_niah_profile(NIAH_PROFILE, RUN)

OUTDIR = RUN.outdir
# models that the workflow builds itself (the tiny demo model): no download
DEMO_MODEL_PATHS = {k: m.path for k, m in RUN.models.items() if m.build_demo}
# models given as a Hub id rather than a local directory: fetch_model puts them in the local
# Hub cache on the head node (compute nodes are offline) and writes this record
HUB_MODELS = {
    k: m
    for k, m in RUN.models.items()
    if not m.build_demo and not os.path.isdir(m.path)
}
HUB_MODEL_RECORD = f"{OUTDIR}/hub/{{model}}.json"
# a scan's calibration, written by calibrate_scan: the rank scales and context means of its SNVs
SCAN_CALIBRATION = f"{OUTDIR}/scans/{{scan}}/{{model}}/calibration"
# a scan's genome-browser tracks (`tracks: true`): the bigWigs every calibrated scan gets
SCAN_TRACKS = f"{OUTDIR}/scans/{{scan}}/{{model}}/tracks"
TRACK_NAMES = [track.name for track in track_set(calibrated=True)]
# the sha256 of every input (record_*_inputs; checked against the config's `sha256:` pins),
# merged into the provenance of each result
DATASET_INPUTS = f"{OUTDIR}/inputs/dataset_{{dataset}}.json"
TASK_INPUTS = f"{OUTDIR}/inputs/task_{{task}}.json"
# a Genomic-NIAH cell (fetched or built), and where a model's results on it go
NIAH_CELL = f"{OUTDIR}/niah/{{niah}}/cells/{{cell}}.parquet"
NIAH_RESULT = f"{OUTDIR}/suite/niah/{{niah}}/{{cell}}/{{model}}"
NIAH_INPUTS = f"{OUTDIR}/inputs/niah_{{niah}}.{{cell}}.json"
MODEL_INPUTS = f"{OUTDIR}/inputs/model_{{model}}.json"
# the comparison gate's baseline: as given, or a relative path shipped with the workflow
WORKFLOW_ROOT = os.path.join(
    workflow.current_basedir.get_path_or_uri(secret_free=True), os.pardir, os.pardir
)
BASELINE = RUN.baseline
if BASELINE and not os.path.isabs(BASELINE) and not os.path.exists(BASELINE):
    BASELINE = os.path.normpath(os.path.join(WORKFLOW_ROOT, BASELINE))
CONFIG_SHA256 = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


wildcard_constraints:
    dataset="|".join(RUN.datasets),
    model="|".join(RUN.models),
    shard=r"\d{5}",
    scan="|".join(RUN.scans) or "^$",
    chunk=r"\d{5}",
    part=r"\d{5}",
    track="|".join(track.name for track in track_set(calibrated=True)),
    niah="|".join(RUN.niah) or "^$",
    cell=r"niah_[A-Za-z0-9_]+",
    # an output file of a scan: contig names encoded (@XX), `+N` for shared files
    file=r"[A-Za-z0-9._@+-]+",


# ---- what the run produces -------------------------------------------------------------------
def dataset_models(dataset):
    return RUN.entry_models(RUN.datasets[dataset])


def scan_models(scan):
    return RUN.entry_models(RUN.scans[scan])


def task_models(task):
    return RUN.entry_models(RUN.tasks[task])


def final_outputs():
    """Scores, metrics and report of every (dataset, model) pair, scans, the suite's outputs."""
    return (
        [
            f"{OUTDIR}/{dataset}/{model}/{name}"
            for dataset in RUN.datasets
            for model in dataset_models(dataset)
            for name in ("scores.parquet", "metrics.json", "report.md")
        ]
        + scan_outputs()
        + suite_outputs()
        + gate_outputs()
    )


def gate_outputs():
    """The comparison with the baseline, when the config names one (rule compare_baseline)."""
    return [f"{OUTDIR}/baseline_comparison.tsv"] if BASELINE else []


def scan_outputs():
    """The summary of every scan and model; it needs the per-contig Parquet dataset and tabix
    TSVs, which need every chunk of the scan's plan."""
    summaries = [
        f"{OUTDIR}/scans/{scan}/{model}/summary.{ext}"
        for scan in RUN.scans
        for model in scan_models(scan)
        for ext in ("json", "md")
    ]
    tracks = [
        os.path.join(SCAN_TRACKS.format(scan=scan, model=model), "tracks.json")
        for scan, entry in RUN.scans.items()
        if entry.tracks
        for model in scan_models(scan)
    ]
    return summaries + tracks


def vcf_exports():
    return [
        f"{OUTDIR}/{dataset}/{model}/results.vcf.gz"
        for dataset, spec in RUN.datasets.items()
        if spec.export_vcf
        for model in dataset_models(dataset)
    ]


def run_results():
    """(directory, row-level file) of every result: variant panels, then suite tasks."""
    panels = [
        (f"{OUTDIR}/{dataset}/{model}", "evaluated.parquet")
        for dataset in RUN.datasets
        for model in dataset_models(dataset)
    ]
    tasks = [
        (f"{OUTDIR}/suite/{task}/{model}", "predictions.parquet")
        for task in RUN.tasks
        for model in task_models(task)
    ]
    niah = [
        (
            NIAH_RESULT.format(niah=key, cell=cell.name, model=model),
            "predictions.parquet",
        )
        for key, entry in RUN.niah.items()
        for cell in entry.cells()
        for model in RUN.entry_models(entry)
    ]
    return panels + tasks + niah


def run_metrics():
    return [f"{folder}/metrics.json" for folder, _ in run_results()]


def run_rows():
    """The row file of each metrics JSON, in the same order (the HTML report plots them):
    the rows a dataset's metrics used, or a task's predictions."""
    return [f"{folder}/{rows}" for folder, rows in run_results()]


def suite_outputs():
    """VCF exports of the panels, the results table and the run's HTML report (a scan-only
    config has no metrics to tabulate, but its report shows the scans' calibration)."""
    tables = [f"{OUTDIR}/results_table.{ext}" for ext in ("parquet", "tsv", "md")]
    pages = [f"{OUTDIR}/report.html", f"{OUTDIR}/summary.md"]
    return (
        vcf_exports()
        + (tables if run_results() else [])
        + (pages if run_dirs() else [])
    )


def run_tables():
    """The results table (Parquet, Markdown) when the run has metrics, for the run report."""
    if not run_results():
        return {}
    return {
        "table": f"{OUTDIR}/results_table.parquet",
        "table_md": f"{OUTDIR}/results_table.md",
    }


def run_scan_dirs():
    """Every scan's output folder (one per scan and model): the run report shows each."""
    return [
        f"{OUTDIR}/scans/{scan}/{model}"
        for scan in RUN.scans
        for model in scan_models(scan)
    ]


def run_dirs():
    return run_results() or run_scan_dirs()


def dataset_pattern(lookup):
    """Wildcard pattern for the datasets scored by lookup in a scan (recipe from_scan), or for
    the others (matches nothing when there are none)."""
    names = [d for d in RUN.datasets if (d in RUN.scan_lookups()) == lookup]
    return "|".join(names) or "^$"


def task_pattern(kind):
    """Wildcard pattern for the tasks of one kind (matches nothing when there are none)."""
    names = [t for t, spec in RUN.tasks.items() if spec.kind == kind]
    return "|".join(names) or "^$"


# ---- input functions -------------------------------------------------------------------------
def dataset_file(key):
    """Input function: a file of the dataset (`panel` or `reference`)."""
    return lambda wc: getattr(RUN.datasets[wc.dataset], key)


def model_files(wildcards):
    """What must exist before a job loads the model: the record of its files' hashes, made
    once they are there (record_model_inputs)."""
    return [MODEL_INPUTS.format(model=wildcards.model)]


def model_sources(wildcards):
    """The model's files as far as the workflow sees them: the demo model directory (built by
    a rule), the record that a Hub model is in the local cache (fetch_model), or every file of
    a local directory (so that a file changed in place reruns what the model made)."""
    if wildcards.model in DEMO_MODEL_PATHS:
        return [DEMO_MODEL_PATHS[wildcards.model]]
    if wildcards.model in HUB_MODELS:
        return [HUB_MODEL_RECORD.format(model=wildcards.model)]
    folder = RUN.models[wildcards.model].path
    return sorted(
        os.path.join(root, name)
        for root, dirs, names in os.walk(folder)
        for name in names
        if not name.startswith(".") and "__pycache__" not in root
    )


def pins(files):
    """The config's `sha256:` pins of these files (--pins)."""
    return shlex.quote(json.dumps({f: RUN.sha256[f] for f in files if f in RUN.sha256}))


def model_pins(wildcards):
    prefix = os.path.join(os.path.normpath(RUN.models[wildcards.model].path), "")
    return shlex.quote(
        json.dumps({f: h for f, h in RUN.sha256.items() if f.startswith(prefix)})
    )


def model_source_args(wildcards):
    """--model PATH [--revision REV] of record-inputs."""
    model = RUN.models[wildcards.model]
    args = ["--model", model.path] + (
        ["--revision", model.revision] if model.revision else []
    )
    return shlex.join(args)


def shard_scores(wildcards):
    """Every shard written by the make_shards checkpoint, scored by this model."""
    shard_dir = checkpoints.make_shards.get(dataset=wildcards.dataset).output.shards
    shards = glob_wildcards(f"{shard_dir}/shard_{{shard}}.parquet").shard
    return expand(
        f"{OUTDIR}/{{dataset}}/{{model}}/shard_scores/shard_{{shard}}.parquet",
        dataset=wildcards.dataset,
        model=wildcards.model,
        shard=sorted(shards),
    )


# ---- resources and the settings each rule passes (`--settings`, one JSON object) -----------
def gpu_count(wildcards):
    """One GPU for a model that runs on CUDA, none for a CPU model."""
    return int(RUN.models[wildcards.model].device.startswith("cuda"))


def attempt_batch_size(wildcards, attempt):
    """The configured batch size, halved on each retry (the usual failure is out of memory)."""
    return max(1, RUN.models[wildcards.model].batch_size // 2 ** (attempt - 1))


def attempt_batch_tokens(wildcards, attempt):
    """The token budget per forward pass (0: none; a GPU profile sets it), halved on each retry."""
    tokens = RUN.models[wildcards.model].batch_tokens
    return max(1, tokens // 2 ** (attempt - 1)) if tokens else 0


def model_settings(wildcards, *groups):
    """The model's settings (the batch sizes are resources) and `groups`, as `--settings`."""
    model = RUN.models[wildcards.model]
    return spec_json(
        model, *groups, exclude=("batch_size", "batch_tokens", "build_demo")
    )


def dataset_settings(*groups):
    """Params function: the named settings groups of the dataset, as `--settings`."""
    return lambda wc: spec_json(*(getattr(RUN.datasets[wc.dataset], g) for g in groups))


def scoring_settings(wildcards):
    return model_settings(wildcards, RUN.datasets[wildcards.dataset].scoring)


def task_settings(wildcards):
    task = RUN.tasks[wildcards.task]
    return model_settings(wildcards, task.settings, task.evaluation)


# ---- Genomic-NIAH (cells, jobs and names: config.run.NiahConfig) ------------------------
def niah_pattern(source):
    """Wildcard pattern for the NIAH entries whose cells come from `source` (hub or build)."""
    names = [k for k, entry in RUN.niah.items() if entry.source == source]
    return "|".join(names) or "^$"


def niah_hub_settings(wildcards):
    entry = RUN.niah[wildcards.niah]
    out = NIAH_CELL.format(niah=wildcards.niah, cell=wildcards.cell)
    return spec_json(entry.hub_file(entry.cell(wildcards.cell), out))


def niah_settings(wildcards):
    entry = RUN.niah[wildcards.niah]
    return model_settings(wildcards, entry.niah, entry.evaluation)


def niah_rows(wildcards):
    """--row-range of a score_niah job, and the cell's task for its rows."""
    start, end = RUN.niah[wildcards.niah].row_ranges()[int(wildcards.part)]
    task = RUN.niah[wildcards.niah].cell(wildcards.cell).task
    return f"{start}:{end} --cell-task {task}"


def niah_runtime(wildcards):
    """Minutes for a score_niah job: its rows at the cell's context on the profile's GPU."""
    entry = RUN.niah[wildcards.niah]
    start, end = entry.row_ranges()[int(wildcards.part)]
    model, gpu = RUN.models[wildcards.model].path, profile_gpu_class(NIAH_PROFILE)
    return niah_runtime_minutes(entry.cell(wildcards.cell).ctx, end - start, model, gpu)


def niah_parts(kind):
    """Input function: the score_niah outputs of a cell (`rows` Parquet or `metrics` JSON)."""
    ext = "parquet" if kind == "rows" else "json"
    return lambda wc: [
        f"{NIAH_RESULT.format(**wc)}/parts/{kind}_{i:05d}.{ext}"
        for i in range(len(RUN.niah[wc.niah].row_ranges()))
    ]


def niah_provenance(wildcards):
    items = {"niah": wildcards.niah, "cell": wildcards.cell}
    return shlex.quote(json.dumps(items | model_provenance(wildcards.model)))


# ---- scans (plan_scan is a checkpoint: chunks and contigs come from its plan) ---------------
def scan_regions(wildcards):
    return " ".join(shlex.quote(r) for r in RUN.scans[wildcards.scan].regions)


def scan_bed_files(wildcards):
    """BED files among the scan's regions (inputs of the plan)."""
    return [r for r in RUN.scans[wildcards.scan].regions if os.path.isfile(r)]


def plan_settings(wildcards):
    scan = RUN.scans[wildcards.scan]
    return spec_json(scan.tiles, scan.chunks)


def scan_model_paths(wildcards):
    """--model KEY=PATH of the scan's models: the plan estimates GPU-hours for each."""
    models = scan_models(wildcards.scan)
    return " ".join(shlex.quote(f"--model={k}={RUN.models[k].path}") for k in models)


def _scan_plan(wildcards):
    path = checkpoints.plan_scan.get(scan=wildcards.scan).output.plan
    return _read_plan(path, os.stat(path).st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _read_plan(path, mtime_ns):
    """The plan JSON, read once per version of the file (input functions ask for every job)."""
    with open(path) as handle:
        return json.load(handle)


def _chunk_file(wildcards, index, ext):
    return f"{OUTDIR}/scans/{wildcards.scan}/{wildcards.model}/chunks/chunk_{index:05d}.{ext}"


def file_chunks(wildcards):
    """The chunks holding bases of this output file's contigs, in plan (= reference) order."""
    files = {entry["name"]: entry for entry in _scan_plan(wildcards)["files"]}
    return [
        _chunk_file(wildcards, i, "parquet") for i in files[wildcards.file]["chunks"]
    ]


def scan_chunk_stats(wildcards):
    chunks = _scan_plan(wildcards)["chunks"]
    return [_chunk_file(wildcards, i, "json") for i in range(len(chunks))]


def scan_output_files(wildcards, kind):
    """The Parquet files, calibration counts or tabix TSVs of the scan: one per output file of
    the plan (a large contig, or small contigs together)."""
    base = f"{OUTDIR}/scans/{wildcards.scan}/{wildcards.model}"
    names = [entry["name"] for entry in _scan_plan(wildcards)["files"]]
    pattern = {
        "parquet": "positions/{}.parquet",
        "counts": "calibration/counts/{}.parquet",
        "tsv": "snvs/{}.tsv.gz",
    }[kind]
    return [f"{base}/{pattern.format(name)}" for name in names]


def scan_neutral_regions(wildcards):
    """The scan's neutral-regions BED (an input of every merge), if it names one."""
    bed = RUN.scans[wildcards.scan].calibration.neutral_regions
    return [bed] if bed else []


def scan_provenance(wildcards):
    scan = RUN.scans[wildcards.scan]
    items = {"scan": wildcards.scan, "build": scan.build, "tile_bp": scan.tiles.tile_bp}
    items["min_context"] = scan.tiles.min_context
    return shlex.quote(json.dumps(items | model_provenance(wildcards.model)))


def lookup_scan_dir(wildcards):
    """The output folder of the scan a from_scan dataset is looked up in, for this model."""
    return f"{OUTDIR}/scans/{RUN.scan_lookups()[wildcards.dataset]}/{wildcards.model}"


def print_scan_plans():
    """At parse time, the plan (bases, SNVs, jobs, N skipped, GPU-hours, bytes) of every scan
    whose plan_scan has run: `snakemake -n` shows it before any model job."""
    for scan in RUN.scans:
        path = f"{OUTDIR}/scans/{scan}/plan.md"
        if os.path.isfile(path):
            with open(path) as handle:
                print(handle.read(), file=sys.stderr)
        else:
            print(
                f"scan {scan}: not planned yet (plan_scan runs first, no model; or run "
                f"`snakemake --until plan_scan` (no model job), then `-n` shows the plan)",
                file=sys.stderr,
            )


def model_provenance(model_key):
    """What a result records about the model and config that made it."""
    model = RUN.models[model_key]
    return {
        "model": model.path,
        "revision": model.revision or "default",
        "dtype": model.dtype,
        "upcast_output_layer": model.upcast_output_layer,
        "config_sha256": CONFIG_SHA256[:16],
    }


def dataset_provenance(wildcards):
    dataset = RUN.datasets[wildcards.dataset]
    items = {"dataset": wildcards.dataset, "build": dataset.build}
    return shlex.quote(json.dumps(items | model_provenance(wildcards.model)))


def task_provenance(wildcards):
    items = {"task": wildcards.task} | model_provenance(wildcards.model)
    return shlex.quote(json.dumps(items))
