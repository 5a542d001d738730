"""What the Snakefile needs from the package while it parses: the demo config and the
shipped inputs' paths, the config read and checked (`read_run_config`, also what `carbon-vep
estimate` reads a config with: schema, RunConfig, the local inputs found), and the check that a
GPU profile runs models on CUDA.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from carbon_vep.config.fields import ConfigError, did_you_mean
from carbon_vep.config.stages import ModelSettings
from carbon_vep.config.tasks import TASK_KINDS

# the rules that run a model (a GPU profile gives each of them a GPU)
MODEL_RULES = (
    "score_shard",
    "scan_chunk",
    *(kind.rule for kind in TASK_KINDS.values()),
    "score_niah",
)
# the GPU class a CUDA model's time is reckoned on when the profile names none (the smallest of
# the profiles', so a time limit or an estimate errs long)
DEFAULT_GPU_CLASS = "A10"


def profile_value(resources: Mapping[str, Any], name: str) -> str:
    """A profile resource as written, its YAML/shell quotes taken off ("" when not set)."""
    return str(resources.get(name, "")).strip("'\"")


def profile_gpu_class(resources: Mapping[str, Any]) -> str | None:
    """The GPU class (config.gpus.GPU_CLASSES) a profile's `gpu_model` names, if one."""
    from carbon_vep.config.gpus import gpu_class_named

    return gpu_class_named(profile_value(resources, "gpu_model"))


_UNITS = {"s": 1 / 60, "m": 1.0, "h": 60.0, "d": 1440.0}


def profile_runtime_minutes(resources: Mapping[str, Any]) -> float | None:
    """A job's time limit at its first attempt, in minutes, from a profile's `runtime`: minutes
    (a number), `N * attempt`, or a span with units ("2h", "1h30m"); None where none is given
    or the expression is another (the workflow's own, or one this does not read)."""
    raw = str(resources.get("runtime", "")).strip().strip("'\"").replace(" ", "")
    if not raw:
        return None
    times = re.fullmatch(r"(\d+(?:\.\d+)?)\*attempt|attempt\*(\d+(?:\.\d+)?)", raw)
    if times:
        return float(times.group(1) or times.group(2))
    if re.fullmatch(r"\d+(?:\.\d+)?", raw):
        return float(raw)
    spans = re.findall(r"(\d+(?:\.\d+)?)([smhd])", raw)
    if spans and "".join(n + u for n, u in spans) == raw:
        return sum(float(n) * _UNITS[u] for n, u in spans)
    return None


def check_niah_profile(resources: Mapping[str, Any], run: Any) -> None:
    """Every Genomic-NIAH cell a CUDA model runs must fit the GPU class the profile gives
    score_niah: on our engine, memory arithmetic at one row, continuations one after the other
    (the least the scorer can do); on vLLM, a row's prompt in the KV cache left by the weights
    at its gpu_memory_utilization over tensor_parallel_size GPUs. Refused while the config is
    read, with the figure and what to change."""
    from carbon_vep.config.gpus import NIAH_SHAPES, niah_shape

    gpu = profile_gpu_class(resources)
    if gpu is None:
        return
    for key, entry in run.niah.items():
        for model_key in run.entry_models(entry):
            model = run.models[model_key]
            if not model.device.startswith("cuda"):
                continue
            shape = niah_shape(model.path, model.build_demo)
            for ctx in sorted(entry.contexts):
                where = f"niah.{key}: a {ctx:,}-token cell of model {model_key} ({shape})"
                if model.engine == "vllm":
                    _check_vllm_cell(where, NIAH_SHAPES[shape], ctx, gpu, model)
                else:
                    _check_cell(where, NIAH_SHAPES[shape], ctx, gpu, entry.niah.prefill_chunk)


def _check_cell(where: str, shape: dict, ctx: int, gpu: str, prefill_chunk: int) -> None:
    from carbon_vep.config.gpus import GPU_CLASSES, niah_memory_bytes

    need = niah_memory_bytes(shape, ctx, prefill_chunk)["total"] / 1e9
    if need > GPU_CLASSES[gpu].memory_gb:
        raise ConfigError(
            f"{where} needs ~{need:.1f} GB of GPU memory (arithmetic, docs/gpu.md) but the "
            f"profile gives score_niah an {gpu} ({GPU_CLASSES[gpu].memory_gb} GB): run these "
            "contexts under a larger GPU's profile (profiles/slurm-h100) or drop them from "
            "`contexts`"
        )


def _check_vllm_cell(where: str, shape: dict, ctx: int, gpu: str, model: ModelSettings) -> None:
    from carbon_vep.config.gpus import VLLM_PAGE_TOKENS, vllm_niah_plan

    vllm = model.vllm
    plan = vllm_niah_plan(shape, ctx, gpu, vllm.gpu_memory_utilization, vllm.tensor_parallel_size)
    if plan["rows_at_once"] < 1:
        raise ConfigError(
            f"{where} on vLLM needs {ctx:,} tokens of KV cache but {vllm.tensor_parallel_size} "
            f"{gpu}(s) at gpu_memory_utilization {vllm.gpu_memory_utilization} leave "
            f"{max(plan['kv_cache_gb'], 0):.1f} GB for it, "
            f"{plan['pages'] * VLLM_PAGE_TOKENS:,.0f} tokens "
            "(arithmetic, docs/gpu.md#vllm): raise tensor_parallel_size or "
            "gpu_memory_utilization, run these contexts under a larger GPU's profile "
            "(profiles/slurm-h100), or drop them from `contexts`"
        )


def check_gpu_profile(
    rule: str, resources: Mapping[str, Any], models: Mapping[str, ModelSettings]
) -> None:
    """A profile that gives `rule` a GPU (gpu / gpu_model in `resources`, the profile's raw
    values) needs models that run on CUDA: a CPU model would hold a GPU it never touches."""
    requested = [
        name
        for name in ("gpu", "gpu_model")
        if name in resources and str(resources[name]).strip("'\"") not in ("", "0")
    ]
    cpu_models = sorted(k for k, m in models.items() if not m.device.startswith("cuda"))
    if requested and cpu_models:
        raise ConfigError(
            f"the profile gives {rule} a GPU ({', '.join(requested)}), but model(s) "
            f"{', '.join(cpu_models)} have device {models[cpu_models[0]].device!r}: set "
            "`device: cuda` for them, or run them under a profile that sends "
            f"{rule} to a CPU partition (docs/cluster.md)"
        )


# how the shipped SLURM profiles mark the values a site must write in (partitions, account)
PLACEHOLDER_PREFIX = "FILL_IN_"


def unfilled_profile(
    defaults: Mapping[str, Any], rules: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """What a profile still leaves to fill in (its default-resources and set-resources, the
    raw values), as one message, or None: sbatch would refuse every job with "invalid
    partition" or "invalid account", each job once more for every retry."""
    layers = [("default-resources", "", defaults)]
    layers += [("set-resources", rule, resources) for rule, resources in rules.items()]
    # (resource, placeholder, section) -> the rules that hold it
    where: dict[tuple[str, str, str], list[str]] = {}
    for section, rule, resources in layers:
        for name in resources:
            value = profile_value(resources, name)
            if value.startswith(PLACEHOLDER_PREFIX):
                where.setdefault((name, value, section), []).append(rule)
    if not where:
        return None
    found = [
        f"{name}: {value} ({section}{': ' + ', '.join(at) if any(at) else ''})"
        for (name, value, section), at in where.items()
    ]
    return (
        f"the profile still holds {len(found)} value(s) to fill in before a job can be "
        f"submitted: {'; '.join(found)}. Write your cluster's partitions and account in its "
        "config.yaml (`sinfo -s` lists partitions, `sacctmgr show associations user=$USER "
        "format=account` your accounts; docs/cluster.md)"
    )


def niah_runtime_minutes(ctx: int, rows: int, model: ModelSettings, gpu: str | None) -> int:
    """A score_niah job's time limit: its rows' prefills at the assumed efficiency of the
    profile's GPU class (DEFAULT_GPU_CLASS when none is named), three times over, plus 10
    minutes to load."""
    from carbon_vep.config.gpus import NIAH_SHAPES, niah_row_seconds, niah_shape

    shape = NIAH_SHAPES[niah_shape(model.path, model.build_demo)]
    seconds = rows * niah_row_seconds(shape, ctx, gpu or DEFAULT_GPU_CLASS)
    return int(10 + 3 * seconds / 60)


# ---- the demo config and the shipped inputs ----------------------------------------------
DEMO_CONFIG = "config/config.yaml"


# inputs shipped with the workflow: the demo fragment and panels, and the small whole genome
SHIPPED_RESOURCES = ("resources/demo/", "resources/genome/")


def resolve_shipped_resources(config: Any, workflow_dir: str) -> Any:
    """`config` with its paths to the shipped inputs (resources/demo/..., resources/genome/...)
    found under `workflow_dir` (the checkout's root), so that the demo, CI and lambda configs run
    from any working directory and as a Snakemake module. What a run writes (the demo model too)
    stays relative."""
    import os

    if os.path.abspath(workflow_dir) == os.path.abspath(os.curdir):
        return config
    if isinstance(config, dict):
        return {
            key: resolve_shipped_resources(value, workflow_dir) for key, value in config.items()
        }
    if isinstance(config, list):
        return [resolve_shipped_resources(value, workflow_dir) for value in config]
    if isinstance(config, str) and config.startswith(SHIPPED_RESOURCES):
        return os.path.join(workflow_dir, config)
    return config


def demo_config_path(workflow_dir: str) -> str:
    """The demo config (what snakemake runs when given no config file) under `workflow_dir`."""
    return os.path.join(workflow_dir, DEMO_CONFIG)


def wants_demo(config: Mapping[str, Any], configfiles: Any, overrides: Mapping[str, Any]) -> bool:
    """Whether a run was given no config of its own: no --configfile, and nothing in `config`
    but the --config / profile `config:` overrides (`overrides`; a module's config, passed by
    the importing workflow, is a config of its own). Then the demo config is read, the
    overrides on top (Snakemake's `configfile:`)."""
    return not configfiles and set(config) <= set(overrides)


def config_source(configfiles: Any, overrides: Mapping[str, Any]) -> str:
    """What a run's config was read from, as errors name it: the config file(s), and the
    --config / profile `config:` keys laid over them."""
    files = [str(f) for f in configfiles or ()]
    where = f"config {', '.join(files)}" if files else "the config passed to the workflow"
    if overrides:
        where += f" (with --config/profile overrides of {sorted(overrides)})"
    return where


# ---- reading a config: the Snakefile and `carbon-vep estimate` read it the same way ------------
def read_config_file(path: str) -> dict[str, Any]:
    """A workflow config file as a mapping; a missing file, YAML that does not parse or a
    document that is not a mapping of keys is a ConfigError naming the file."""
    import yaml

    try:
        with open(path) as handle:
            data = yaml.safe_load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config {path}: file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"config {path}: cannot be read ({err})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"config {path}: not YAML{where} ({problem})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config {path}: expected a mapping of config keys (models:, datasets:, ...), "
            f"found a {type(data).__name__}"
        )
    return data


def read_run_config(
    config: dict[str, Any], source: str, workflow_root: str = ".", check_inputs: bool = True
) -> Any:
    """The one way a workflow config is read (the Snakefile's common.smk, `carbon-vep
    estimate`): checked against the schema (config.schema, the same the workflow's schema file
    is written from; the schema's defaults are filled into `config`), typed and checked as a
    whole (`RunConfig`), and with `check_inputs` every local input it names found
    (`missing_inputs`). Every refusal is a ConfigError naming `source` (the config file(s)
    read) and the config key; settings are named by their config keys, not CLI flags."""
    from carbon_vep.config.fields import INTERFACE_VARIABLE
    from carbon_vep.config.run import RunConfig

    previous = os.environ.get(INTERFACE_VARIABLE)
    os.environ[INTERFACE_VARIABLE] = "workflow"
    try:
        check_schema(config, source)
        try:
            run = RunConfig.from_dict(config)
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}") from None
    finally:
        if previous is None:
            del os.environ[INTERFACE_VARIABLE]
        else:
            os.environ[INTERFACE_VARIABLE] = previous
    home = home_paths(run, workflow_root)
    if home:
        raise ConfigError(
            f"{source}: `~` is not expanded in the config's paths (Snakemake would look for a "
            "folder named `~`, and a model path that is no local folder is read as a Hub id): "
            f"write them out in full: {'; '.join(home)}"
        )
    if check_inputs:
        missing = missing_inputs(run, workflow_root)
        if missing:
            raise ConfigError(
                f"{source}: input file(s) not found (relative paths are read from "
                f"{os.path.abspath(os.curdir)}): {'; '.join(missing)}"
            )
    return run


def check_schema(config: dict[str, Any], source: str) -> None:
    """`config` against the workflow's JSON schema, the schema's defaults set into it (as
    Snakemake's `validate` does); the first error as one line naming `source` and the key
    (no schema dump)."""
    from jsonschema import Draft202012Validator, validators

    from carbon_vep.config.entries import SECTIONS
    from carbon_vep.config.schema import json_schema

    schema = json_schema()
    validate_properties = Draft202012Validator.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, subschema):
        for name, prop in properties.items():
            if "default" in prop and isinstance(instance, dict):
                instance.setdefault(name, prop["default"])
        yield from validate_properties(validator, properties, instance, subschema)

    with_defaults = validators.extend(Draft202012Validator, {"properties": set_defaults})
    errors = sorted(with_defaults(schema).iter_errors(config), key=lambda e: list(e.path))
    if not errors:
        return
    error = errors[0]
    where = ".".join(str(part) for part in error.path)
    if error.validator == "required":
        missing = sorted(set(error.validator_value) - set(error.instance))
        problem = f"missing required key(s) {missing}" + (
            f" (`{where}`)" if where else " at the top level"
        )
        if "models" in missing and not where:
            problem += ": `models:` names the models to run (config/README.md)"
        raise ConfigError(f"{source}: {problem}")
    if "propertyNames" in error.schema_path:
        raise ConfigError(
            f"{source}: {where}: entry key {error.instance!r} may hold only letters, digits, "
            "`_`, `.` and `-` (it is used in output paths)"
        )
    if error.validator == "minProperties":
        raise ConfigError(f"{source}: {where}: needs at least one entry")
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = error.schema.get("properties", {})
        unknown = [key for key in error.instance if key not in allowed]
        # the run's own keys (outdir, shard_size, ...), not its sections' names
        top_level = set(schema["properties"]) - set(SECTIONS) if where else set()
        problems = [_unknown_key(str(key), where, allowed, top_level) for key in unknown]
        raise ConfigError(f"{source}: {'; '.join(problems)}")
    raise ConfigError(f"{source}: {where or 'top level'}: {error.message}")


def _unknown_key(key: str, where: str, allowed: Mapping[str, Any], top_level: set[str]) -> str:
    """What a key the schema does not allow at `where` most likely meant: one of the keys
    allowed there, spelled closest (a typo), or a top-level key written in an entry."""
    path = f"{where}.{key}" if where else key
    level = f"a key of a {where.split('.')[0]} entry" if where else "a top-level config key"
    if key in top_level:
        return f"{path}: not {level}; `{key}` is a top-level key: move it there"
    return f"{path}: not {level}" + (did_you_mean(key, allowed) or " (config/README.md lists them)")


# inputs that a head-node rule fetches or builds are no user's to bring
def _produced(run: Any) -> set[str]:
    outs = {entry.out for entry in [*run.hub_files.values(), *run.downloads.values()]}
    outs |= {m.path for m in run.models.values() if m.build_demo}
    return {os.path.normpath(p) for p in outs}


def local_inputs(run: Any, workflow_root: str = ".") -> list[tuple[str, str]]:
    """(config key, path) of every local file the config names as an input that no rule of
    the workflow writes (Hub files, downloads and the demo model are written by rules): panels,
    references, task files, scans' BED files and neutral regions, local model directories
    (a path that starts with /, . or ~, or is not of a Hub id's shape ORG/NAME: a Hub id is
    fetched), and the baseline."""
    from carbon_vep.config.run import is_hub_id

    paths: list[tuple[str, str]] = []
    for key, dataset in run.datasets.items():
        paths += [(f"datasets.{key}.panel", dataset.panel)]
        paths += [(f"datasets.{key}.reference", dataset.reference)]
    for key, scan in run.scans.items():
        paths += [(f"scans.{key}.reference", scan.reference)]
        paths += [
            (f"scans.{key}.regions", region)
            for region in scan.regions
            if region.endswith((".bed", ".bed.gz")) or os.path.isfile(region)
        ]
        if scan.calibration.neutral_regions:
            paths += [(f"scans.{key}.neutral_regions", scan.calibration.neutral_regions)]
    paths += [(f"tasks.{key}.path", task.path) for key, task in run.tasks.items()]
    paths += [
        (f"niah.{key}.reference", entry.reference)
        for key, entry in run.niah.items()
        if entry.source == "build" and entry.reference
    ]
    paths += [
        (f"models.{key}.path", model.path)
        for key, model in run.models.items()
        if not model.build_demo
        and (model.path.startswith(("/", ".", "~")) or not is_hub_id(model.path))
    ]
    produced = _produced(run)
    out = [(key, path) for key, path in paths if os.path.normpath(path) not in produced]
    if run.baseline:
        out.append(("baseline", resolve_baseline(run.baseline, workflow_root)))
    return out


def resolve_baseline(baseline: str, workflow_root: str) -> str:
    """The comparison gate's baseline: as given, or a relative path shipped with the workflow
    (found under `workflow_root`, the checkout)."""
    if os.path.isabs(baseline) or os.path.exists(baseline):
        return baseline
    return os.path.normpath(os.path.join(workflow_root, baseline))


def home_paths(run: Any, workflow_root: str = ".") -> list[str]:
    """`KEY: PATH` for each path of the config written from the home folder (`~/...`): the
    inputs (`local_inputs`), the outputs and the baseline."""
    paths = [(key, path) for key, path in local_inputs(run, workflow_root) if key != "baseline"]
    paths += [("outdir", run.outdir), ("baseline", run.baseline or "")]
    paths += [(f"hub_files.{key}.out", entry.out) for key, entry in run.hub_files.items()]
    paths += [(f"downloads.{key}.out", entry.out) for key, entry in run.downloads.items()]
    return [f"{key}: {path}" for key, path in paths if path.startswith("~")]


def missing_inputs(run: Any, workflow_root: str = ".") -> list[str]:
    """`KEY: PATH` for each local input of the config (`local_inputs`) that is not there.
    Snakemake reruns nothing whose outputs exist, so it would not notice these (an old result
    would stand for the new config)."""
    return [
        f"{key}: {path}"
        for key, path in local_inputs(run, workflow_root)
        if not os.path.exists(path)
    ]
