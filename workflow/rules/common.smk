import hashlib
import json
import os
import shlex

from snakemake.utils import validate

validate(config, schema="../schemas/config.schema.yaml")

# Spellings of one assembly; builds are compared in this form.
BUILD_SYNONYMS = {
    "hg38": "GRCh38",
    "grch38": "GRCh38",
    "hg19": "GRCh37",
    "grch37": "GRCh37",
    "b37": "GRCh37",
    "hs37d5": "GRCh37",
    "hg18": "NCBI36",
    "ncbi36": "NCBI36",
    "mm39": "GRCm39",
    "grcm39": "GRCm39",
    "mm10": "GRCm38",
    "grcm38": "GRCm38",
}


def check_reference_builds(config):
    """Datasets (and scans) that share a reference file must declare the same build."""
    first_user = {}
    for kind in ("datasets", "scans"):
        for name, spec in config.get(kind, {}).items():
            build = BUILD_SYNONYMS.get(spec["build"].lower(), spec["build"])
            here = (f"{kind[:-1]} {name!r}", spec["build"], build)
            other = first_user.setdefault(os.path.realpath(spec["reference"]), here)
            if other[2] != build:
                raise ValueError(
                    f"{other[0]} (build {other[1]}) and {here[0]} (build {here[1]}) use the "
                    f"same reference {spec['reference']}: one FASTA holds one build; point "
                    "each at the FASTA of its own build, or correct the `build` that is wrong"
                )


check_reference_builds(config)

OUTDIR = config["outdir"]
# models that the workflow builds itself (the tiny demo model): no download
DEMO_MODEL_PATHS = {
    k: m["path"] for k, m in config["models"].items() if m["build_demo"]
}
# models given as a Hub id rather than a local directory: fetch_model puts them in the local
# Hub cache on the head node (compute nodes are offline) and writes this record
HUB_MODELS = {
    k: m["path"]
    for k, m in config["models"].items()
    if not m["build_demo"] and not os.path.isdir(m["path"])
}
HUB_MODEL_RECORD = f"{OUTDIR}/hub/{{model}}.json"
CONFIG_SHA256 = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


wildcard_constraints:
    dataset="|".join(config["datasets"]),
    model="|".join(config["models"]),
    shard=r"\d{5}",
    scan="|".join(config["scans"]) or "^$",
    region=r"\d{5}",


def dataset_models(dataset):
    return config["datasets"][dataset].get("models", list(config["models"]))


def final_outputs():
    """Scores, metrics and report of every (dataset, model) pair in the config."""
    return (
        [
            f"{OUTDIR}/{dataset}/{model}/{name}"
            for dataset in config["datasets"]
            for model in dataset_models(dataset)
            for name in ("scores.parquet", "metrics.json", "report.md")
        ]
        + scan_outputs()
        + suite_outputs()
    )


def window_args(wildcards):
    """Window length when configured; otherwise the CLI applies the recipe's published one."""
    ds = config["datasets"][wildcards.dataset]
    return f"--window-bp {ds['window_bp']}" if "window_bp" in ds else ""


def panel_args(wildcards):
    """How check-panel reads, labels and checks this dataset's panel."""
    ds = config["datasets"][wildcards.dataset]
    args = [f"--format {ds['format']}", f"--build {shlex.quote(ds['build'])}"]
    args += [
        f"--column {shlex.quote(f'{std}={src}')}" for std, src in ds["columns"].items()
    ]
    args += [f"--info-field {shlex.quote(field)}" for field in ds["info_fields"]]
    args += [
        f"--indel-policy {ds['indel_policy']}",
        f"--label-source {ds['label_source']}",
    ]
    if ds["label_column"]:
        args.append(f"--label-column {shlex.quote(ds['label_column'])}")
    if ds["label_source"] == "clinvar_clnsig":
        args.append(f"--clnsig-field {shlex.quote(ds['clnsig_field'])}")
        args += [
            f"--clnsig-label {shlex.quote(f'{term}={label}')}"
            for term, label in ds["clnsig_labels"].items()
        ]
    return " ".join(args)


def model_files(wildcards):
    """What must exist before a job loads the model: the demo model directory (built by a rule)
    or the record that a Hub model is in the local cache (fetch_model)."""
    if wildcards.model in DEMO_MODEL_PATHS:
        return [DEMO_MODEL_PATHS[wildcards.model]]
    if wildcards.model in HUB_MODELS:
        return [HUB_MODEL_RECORD.format(model=wildcards.model)]
    return []


def revision_arg(revision):
    return f"--revision {shlex.quote(revision)}" if revision else ""


def model_load_args(wildcards):
    """How to load the model (path, revision, dtype, device, remote code); no batch size."""
    m = config["models"][wildcards.model]
    args = f"--model {m['path']} --dtype {m['dtype']} --device {m['device']}"
    args += f" {revision_arg(m['revision'])}" if m["revision"] else ""
    return args + ("" if m["trust_remote_code"] else " --no-trust-remote-code")


def gpu_count(wildcards):
    """One GPU for a model that runs on CUDA, none for a CPU model."""
    return int(config["models"][wildcards.model]["device"].startswith("cuda"))


def attempt_batch_size(wildcards, attempt):
    """The configured batch size, halved on each retry (the usual failure is out of memory)."""
    return max(1, config["models"][wildcards.model]["batch_size"] // 2 ** (attempt - 1))


def check_gpu_profile(rule):
    """A profile that gives `rule` a GPU (gpu / gpu_model) needs models that run on CUDA: a
    CPU model would hold a GPU it never touches."""
    overrides = workflow.resource_settings.overwrite_resources.get(rule, {})
    requested = [
        name
        for name in ("gpu", "gpu_model")
        if name in overrides and str(overrides[name].raw).strip("'\"") not in ("", "0")
    ]
    cpu_models = sorted(
        k for k, m in config["models"].items() if not m["device"].startswith("cuda")
    )
    if requested and cpu_models:
        raise ValueError(
            f"the profile gives {rule} a GPU ({', '.join(requested)}), but model(s) "
            f"{', '.join(cpu_models)} have device {config['models'][cpu_models[0]]['device']!r}: "
            "set `device: cuda` for them, or run them under a profile that sends "
            f"{rule} to a CPU partition (README, 'Running on a cluster')"
        )


# the rules that run a model (the GPU profiles give each of them a GPU)
MODEL_RULES = ("score_shard", "scan_region", "score_recovery", "score_perturbation")
for rule_name in MODEL_RULES:
    check_gpu_profile(rule_name)


def recipe_args(wildcards):
    ds = config["datasets"][wildcards.dataset]
    args = f"--recipe {ds['recipe']} --normalization {ds['normalization']}"
    args += f" --tile-bp {ds['tile_bp']} --min-context {ds['min_context']}"
    args += "" if ds["share_prefix"] else " --no-share-prefix"
    return args + (" --rc-average" if ds["rc_average"] else "")


def scan_models(scan):
    return config["scans"][scan].get("models", list(config["models"]))


def scan_outputs():
    """Per-position and per-SNV tables of every configured scan region and model, and the
    per-SNV scores as a tabix-indexed TSV (vcfanno)."""
    return [
        f"{OUTDIR}/scans/{scan}/{model}/region_{index:05d}.{table}"
        for scan, spec in config["scans"].items()
        for model in scan_models(scan)
        for index in range(len(spec["regions"]))
        for table in ("positions.parquet", "snvs.parquet", "snvs.tsv.gz")
    ]


def label_args(wildcards):
    ds = config["datasets"][wildcards.dataset]
    if not ds["label_column"]:
        return ""
    return (
        f"--label-column {ds['label_column']}"
        f" --positive {' '.join(ds['positive_labels'])}"
        f" --negative {' '.join(ds['negative_labels'])}"
    )


def model_provenance(model):
    m = config["models"][model]
    return {
        "model": m["path"],
        "revision": m["revision"] or "default",
        "dtype": m["dtype"],
        "config_sha256": CONFIG_SHA256[:16],
    }


def provenance_args(wildcards):
    items = {
        "dataset": wildcards.dataset,
        "build": config["datasets"][wildcards.dataset]["build"],
        **model_provenance(wildcards.model),
    }
    return " ".join(f"--provenance {shlex.quote(f'{k}={v}')}" for k, v in items.items())


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


# ---- metrics, zero-shot suite, run report, exports ------------------------------------------
if "suite" in config["datasets"]:
    raise ValueError("dataset name 'suite' is reserved: OUTDIR/suite holds suite tasks")


def task_models(task):
    return config["tasks"][task].get("models", list(config["models"]))


def task_pattern(kind):
    """Wildcard pattern for the tasks of one kind (matches nothing when there are none)."""
    names = [t for t, spec in config["tasks"].items() if spec["kind"] == kind]
    return "|".join(names) or "^$"


def vcf_exports():
    return [
        f"{OUTDIR}/{dataset}/{model}/results.vcf.gz"
        for dataset, spec in config["datasets"].items()
        if spec["export_vcf"]
        for model in dataset_models(dataset)
    ]


def run_results():
    """(directory, row-level file) of every result: variant panels, then suite tasks."""
    panels = [
        (f"{OUTDIR}/{dataset}/{model}", "scores.parquet")
        for dataset in config["datasets"]
        for model in dataset_models(dataset)
    ]
    tasks = [
        (f"{OUTDIR}/suite/{task}/{model}", "predictions.parquet")
        for task in config["tasks"]
        for model in task_models(task)
    ]
    return panels + tasks


def run_metrics():
    return [f"{folder}/metrics.json" for folder, _ in run_results()]


def run_rows():
    """The row-level file next to each metrics JSON (the HTML report plots from them)."""
    return [f"{folder}/{rows}" for folder, rows in run_results()]


def suite_outputs():
    """VCF exports of the panels, the results table and the run's HTML report."""
    names = ("results_table.parquet", "results_table.tsv", "results_table.md")
    run = [f"{OUTDIR}/{name}" for name in (*names, "report.html", "summary.md")]
    return vcf_exports() + run


def metric_args(wildcards):
    ds = config["datasets"][wildcards.dataset]
    args = [
        f"--task {wildcards.dataset} --model-key {wildcards.model}",
        "--headline " + " ".join(shlex.quote(m) for m in ds["headline_metrics"]),
        "--breakdown " + " ".join(shlex.quote(c) for c in ds["breakdown_columns"]),
        f"--bootstrap {config['bootstrap']}",
    ]
    if ds["spearman_column"]:
        args.append(f"--spearman-column {shlex.quote(ds['spearman_column'])}")
    return " ".join(args)


def task_args(wildcards):
    """The task's own settings, its result naming and provenance."""
    spec = config["tasks"][wildcards.task]
    if spec["kind"] == "sequence_recovery":
        args = [
            f"--decoder {spec['decoder']} --max-prompt-bp {spec['max_prompt_bp']}",
            f"--new-tokens {spec['new_tokens']} --score-bp {spec['score_bp']}",
        ]
    else:
        args = [f"--scoring {spec['scoring']} --normalization {spec['normalization']}"]
    args.append(f"--task {wildcards.task} --model-key {wildcards.model}")
    args.append(f"--bootstrap {config['bootstrap']}")
    items = {"task": wildcards.task, **model_provenance(wildcards.model)}
    args += [f"--provenance {shlex.quote(f'{k}={v}')}" for k, v in items.items()]
    return " ".join(args)


def hub_args(name):
    spec = config["hub_files"][name]
    args = f"--repo-id {shlex.quote(spec['repo_id'])} --filename {shlex.quote(spec['filename'])}"
    args += f" --repo-type {spec['repo_type']}"
    if spec["revision"]:
        args += f" --revision {shlex.quote(spec['revision'])}"
    return args
