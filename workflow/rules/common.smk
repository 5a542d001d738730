import hashlib
import json

from snakemake.utils import validate

validate(config, schema="../schemas/config.schema.yaml")

OUTDIR = config["outdir"]
# models that the workflow builds itself (the tiny demo model): no download
DEMO_MODEL_PATHS = {
    k: m["path"] for k, m in config["models"].items() if m["build_demo"]
}
CONFIG_SHA256 = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


wildcard_constraints:
    dataset="|".join(config["datasets"]),
    model="|".join(config["models"]),
    shard=r"\d{5}",


def dataset_models(dataset):
    return config["datasets"][dataset].get("models", list(config["models"]))


def final_outputs():
    """Scores, metrics and report of every (dataset, model) pair in the config."""
    return [
        f"{OUTDIR}/{dataset}/{model}/{name}"
        for dataset in config["datasets"]
        for model in dataset_models(dataset)
        for name in ("scores.parquet", "metrics.json", "report.md")
    ]


def window_args(wildcards):
    """Window length when configured; otherwise the CLI applies the recipe's published one."""
    ds = config["datasets"][wildcards.dataset]
    return f"--window-bp {ds['window_bp']}" if "window_bp" in ds else ""


def panel_args(wildcards):
    ds = config["datasets"][wildcards.dataset]
    args = [f"--format {ds['format']}"]
    args += [f"--column {std}={src}" for std, src in ds["columns"].items()]
    args += [f"--info-field {field}" for field in ds["info_fields"]]
    return " ".join(args)


def model_files(wildcards):
    """The demo model directory is built by a rule; Hub ids and user directories are inputs as-is."""
    model = config["models"][wildcards.model]
    return [model["path"]] if model["build_demo"] else []


def model_args(wildcards):
    m = config["models"][wildcards.model]
    args = f"--model {m['path']} --dtype {m['dtype']} --device {m['device']}"
    args += f" --batch-size {m['batch_size']}"
    args += f" --revision {m['revision']}" if m["revision"] else ""
    return args + ("" if m["trust_remote_code"] else " --no-trust-remote-code")


def recipe_args(wildcards):
    ds = config["datasets"][wildcards.dataset]
    args = f"--recipe {ds['recipe']} --normalization {ds['normalization']}"
    return args + (" --rc-average" if ds["rc_average"] else "")


def label_args(wildcards):
    ds = config["datasets"][wildcards.dataset]
    if not ds["label_column"]:
        return ""
    return (
        f"--label-column {ds['label_column']}"
        f" --positive {' '.join(ds['positive_labels'])}"
        f" --negative {' '.join(ds['negative_labels'])}"
    )


def provenance_args(wildcards):
    m = config["models"][wildcards.model]
    items = {
        "dataset": wildcards.dataset,
        "build": config["datasets"][wildcards.dataset]["build"],
        "model": m["path"],
        "revision": m["revision"] or "default",
        "dtype": m["dtype"],
        "config_sha256": CONFIG_SHA256[:16],
    }
    return " ".join(f"--provenance {k}={v}" for k, v in items.items())


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
