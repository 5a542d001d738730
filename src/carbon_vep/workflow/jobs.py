"""What each job is given, from the config and its wildcards: input functions (the model's
files, a dataset's files), the `--settings` JSON of a rule, resources (GPUs, batch sizes halved
on each retry, a NIAH job's time), the `--pins` of record-inputs and each result's provenance.

Every method that takes `wc` is a Snakemake input, params or resources function (`wc` is the
job's wildcards: any object with the named attributes)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Iterable
from typing import Any

from carbon_vep.config.fields import ConfigError, spec_json
from carbon_vep.config.gpus import host_memory_mb
from carbon_vep.config.run import RunConfig
from carbon_vep.config.stages import GENERATION_ONLY, EvaluationSettings
from carbon_vep.config.task_entry import TaskConfig
from carbon_vep.config.tasks import SWEEP_KEY, TASK_KINDS, SweepPoint, kind_of_rule
from carbon_vep.config.workflow import DEFAULT_GPU_CLASS, niah_runtime_minutes
from carbon_vep.estimate.costs import recovery_job_seconds, recovery_work, shape_of
from carbon_vep.estimate.counts import Count, input_count
from carbon_vep.workflow.digests import settings_sha256
from carbon_vep.workflow.paths import RunPaths

# A model job's own metrics (a part's: score_recovery, score_perturbation, score_niah) are
# point estimates, whatever the config's evaluation settings: the intervals are the merge's,
# a CPU job, so a change of `bootstrap` reruns no model job (docs/reproducibility.md).
POINT_ESTIMATES = EvaluationSettings(bootstrap=0)


def quoted_json(items: dict) -> str:
    return shlex.quote(json.dumps(items))


class Jobs:
    def __init__(
        self,
        run: RunConfig,
        niah_gpu: str | None = None,
        workflow_root: str = ".",
        recovery_gpu: str | None = None,
    ) -> None:
        self.run, self.niah_gpu = run, niah_gpu
        self.recovery_gpu = recovery_gpu  # the profile's GPU class of score_recovery, if named
        self._task_counts: dict[str, Count | None] = {}
        self.workflow_root = workflow_root
        self.paths = RunPaths(run.outdir)
        # models the workflow builds itself (the tiny demo model): no download
        self.demo_model_paths = {k: m.path for k, m in run.models.items() if m.build_demo}
        # models given as a Hub id rather than a local directory: fetch_model caches them
        self.hub_models = {
            k: m for k, m in run.models.items() if not m.build_demo and not os.path.isdir(m.path)
        }

    # ---- inputs ---------------------------------------------------------------------------
    def dataset_file(self, key: str) -> Callable[[Any], str]:
        """Input function: a file of the dataset (`panel` or `reference`)."""
        return lambda wc: getattr(self.run.datasets[wc.dataset], key)

    def model_files(self, wc: Any) -> list[str]:
        """What must exist before a job loads the model: the record of its files' hashes."""
        return [self.paths.model_inputs.format(model=wc.model)]

    def model_sources(self, wc: Any) -> list[str]:
        """The model's files as far as the workflow sees them: the demo model directory (built
        by a rule), the record that a Hub model is in the local cache (fetch_model), or every
        file of a local directory (so that a file changed in place reruns what it made)."""
        if wc.model in self.demo_model_paths:
            return [self.demo_model_paths[wc.model]]
        if wc.model in self.hub_models:
            return [self.paths.hub_model_record.format(model=wc.model)]
        return sorted(
            os.path.join(root, name)
            for root, _, names in os.walk(self.run.models[wc.model].path)
            for name in names
            if not name.startswith(".") and "__pycache__" not in root
        )

    def lookup_scan_file(self, pattern: str) -> Callable[[Any], str]:
        """Input function: `pattern` (a RunPaths pattern under scan_dir) in the scan a from_scan
        dataset is looked up in, for this model."""
        return lambda wc: pattern.format(scan=self.run.scan_lookups()[wc.dataset], model=wc.model)

    def lookup_scan_dir(self, wc: Any) -> str:
        """The output folder of the scan a from_scan dataset is looked up in, for this model."""
        return self.lookup_scan_file(self.paths.scan_dir)(wc)

    # ---- record-inputs ----------------------------------------------------------------------
    def pins(self, files: Iterable[str]) -> str:
        """The config's `sha256:` pins of these files (--pins)."""
        return quoted_json({f: self.run.sha256[f] for f in files if f in self.run.sha256})

    def model_pins(self, wc: Any) -> str:
        prefix = os.path.join(os.path.normpath(self.run.models[wc.model].path), "")
        return quoted_json({f: h for f, h in self.run.sha256.items() if f.startswith(prefix)})

    def model_source_args(self, wc: Any) -> str:
        """--model PATH [--revision REV] of record-inputs."""
        model = self.run.models[wc.model]
        revision = ["--revision", model.revision] if model.revision else []
        return shlex.join(["--model", model.path, *revision])

    # ---- resources ----------------------------------------------------------------------------
    def model_resources(self, generation: bool = False, runtime: Any = 120) -> dict[str, Any]:
        """The `resources:` of a rule that runs a model: its GPUs (a generation job's engine
        may take several), the batch sizes halved on each retry, host memory from the model's
        weights, and minutes (a number, or a function of the job). A cluster profile may
        override any of them."""
        return {
            "gpu": self.generation_gpu_count if generation else self.gpu_count,
            "batch_size": self.attempt_batch_size,
            "batch_tokens": self.attempt_batch_tokens,
            "mem_mb": self.host_memory_mb,
            "runtime": runtime,
        }

    def task_resources(self, rule: str) -> dict[str, Any]:
        """The `resources:` of a task kind's rule (a generation kind's engine may take several
        GPUs, and its time limit follows from its rollouts: recovery_runtime)."""
        if kind_of_rule(rule).generation:
            return self.model_resources(generation=True, runtime=self.recovery_runtime)
        return self.model_resources()

    def host_memory_mb(self, wc: Any) -> int:
        """Host memory for the model's weights, read on the host before they move to the
        device (config.gpus.host_memory_mb, on the shape its config.json or name gives)."""
        model = self.run.models[wc.model]
        return host_memory_mb(shape_of(model).dims, model.dtype)

    def gpu_count(self, wc: Any) -> int:
        """One GPU for a model that runs on CUDA, none for a CPU model."""
        return int(self.run.models[wc.model].device.startswith("cuda"))

    def generation_gpu_count(self, wc: Any) -> int:
        """A generation job's GPUs: vLLM's tensor_parallel_size of them on that engine."""
        model = self.run.models[wc.model]
        if model.engine == "vllm" and model.device.startswith("cuda"):
            return model.vllm.tensor_parallel_size
        return self.gpu_count(wc)

    def generation_command(self, wc: Any) -> str:
        """The carbon-vep of a generation job: the vLLM environment's on engine vllm."""
        model = self.run.models[wc.model]
        if model.engine != "vllm":
            return "carbon-vep"
        env = model.vllm.vllm_env
        folder = env if os.path.isabs(env) else os.path.join(self.workflow_root, env)
        return shlex.quote(os.path.join(os.path.normpath(folder), "bin", "carbon-vep"))

    def attempt_batch_size(self, wc: Any, attempt: int) -> int:
        """The configured batch size, halved on each retry (the usual failure is OOM)."""
        return max(1, self.run.models[wc.model].batch_size // 2 ** (attempt - 1))

    def attempt_batch_tokens(self, wc: Any, attempt: int) -> int:
        """The token budget a forward pass (0: none; a GPU profile sets it), halved on retry."""
        tokens = self.run.models[wc.model].batch_tokens
        return max(1, tokens // 2 ** (attempt - 1)) if tokens else 0

    def niah_runtime(self, wc: Any) -> int:
        """Minutes for a score_niah job: its rows at the cell's context on the profile's GPU."""
        entry = self.run.niah[wc.niah]
        start, end = entry.row_ranges()[int(wc.part)]
        model = self.run.models[wc.model]
        return niah_runtime_minutes(entry.cell(wc.cell).ctx, end - start, model, self.niah_gpu)

    def recovery_runtime(self, wc: Any) -> int:
        """Minutes for a score_recovery job: its prompts' prefills and rollouts on the
        profile's GPU class (estimate.costs.recovery_job_seconds, the decode steps at no less
        than the host-bound step measured on an H100), twice over, plus 10 minutes to load;
        a part job's for its share of the prompts; 120 where the model's shape or the prompts'
        count is unknown."""
        task, model = self.task(wc), self.run.models[wc.model]
        if task.path not in self._task_counts:  # read once a file, not once a job
            self._task_counts[task.path] = input_count(task.path, self.run)
        shape, count = shape_of(model), self._task_counts[task.path]
        if shape.dims is None or count is None:
            return 120
        work = recovery_work(task.settings, model, shape.dims, count.sequence_bp)
        gpu, rows = self.recovery_gpu or DEFAULT_GPU_CLASS, -(-count.rows // task.parts)
        return int(10 + 2 * recovery_job_seconds(work, shape.dims, rows, gpu) / 60)

    # ---- settings (`--settings`, one JSON object) --------------------------------------------
    def model_settings(self, wc: Any, *groups: Any, generation: bool = False) -> str:
        """The model's settings (the batch sizes are resources) and `groups`; the engine and
        vLLM's options only for a generation task (NIAH, sequence recovery)."""
        model = self.run.draft_settings(self.run.models[wc.model])
        engine = ("vllm_env",) if generation else GENERATION_ONLY
        exclude = ("batch_size", "batch_tokens", "build_demo", *engine)
        return spec_json(model, *groups, exclude=exclude)

    def dataset_settings(self, *groups: str) -> Callable[[Any], str]:
        """Params function: the named settings groups of the dataset."""
        return lambda wc: spec_json(*(getattr(self.run.datasets[wc.dataset], g) for g in groups))

    def scoring_settings(self, wc: Any) -> str:
        return self.model_settings(wc, self.run.datasets[wc.dataset].scoring)

    def sweep_point(self, wc: Any) -> SweepPoint | None:
        """The sweep point a task job runs (its `{point}` wildcard; None: the headline)."""
        folder = getattr(wc, "point", "")
        if not folder:
            return None
        points = {self.paths.sweep_point(p): p for p in self.run.sweep_points(wc.task)}
        if folder not in points:
            raise ValueError(f"task {wc.task} has no sweep point {folder!r}")
        return points[folder]

    def task(self, wc: Any) -> TaskConfig:
        """A task job's entry, at its sweep point when it runs one."""
        point = self.sweep_point(wc)
        task = self.run.tasks[wc.task]
        return task if point is None else task.at(point)

    def task_settings(self, wc: Any) -> str:
        """A task's model job: the model's settings and the kind's, its metrics point estimates
        (POINT_ESTIMATES: the merge's --settings hold the evaluation's, task_merge_settings)."""
        task = self.task(wc)
        generation = TASK_KINDS[task.kind].generation
        return self.model_settings(wc, task.settings, POINT_ESTIMATES, generation=generation)

    def niah_settings(self, wc: Any) -> str:
        """A score_niah job: the model's settings and the entry's NIAH settings, its metrics
        point estimates (merge_niah computes the intervals with the entry's evaluation)."""
        entry = self.run.niah[wc.niah]
        return self.model_settings(wc, entry.niah, POINT_ESTIMATES, generation=True)

    def niah_hub_settings(self, wc: Any) -> str:
        entry = self.run.niah[wc.niah]
        out = self.paths.niah_cell.format(niah=wc.niah, cell=wc.cell)
        return spec_json(entry.hub_file(entry.cell(wc.cell), out))

    def niah_build_args(self, wc: Any) -> str:
        return shlex.join(self.run.niah[wc.niah].build_args(wc.cell))

    def niah_rows(self, wc: Any) -> str:
        """--row-range of a score_niah job, and the cell's task for its rows."""
        entry = self.run.niah[wc.niah]
        start, end = entry.row_ranges()[int(wc.part)]
        return f"{start}:{end} --cell-task {entry.cell(wc.cell).task}"

    def checked_niah_cell(self, wc: Any, path: str) -> str:
        """A Hub entry's fetched cell (`path`), refused unless it holds the entry's `rows`: the
        score_niah jobs cut `rows` into row ranges, and merge_niah would refuse their parts
        only after every model job had run. Reads the Parquet footer alone."""
        import pyarrow.parquet as pq

        rows = self.run.niah[wc.niah].rows
        held = pq.read_metadata(path).num_rows
        if held != rows:
            raise ConfigError(
                f"niah.{wc.niah}: rows is {rows}, but its cell {path} (fetched from the Hub) "
                f"holds {held} rows; set `rows: {held}` (a job scores a range of a cell's rows "
                "and the ranges must cover the cell once); refused before any score_niah job"
            )
        return path

    def niah_parts(self, wc: Any) -> list[str]:
        """Input function: the score_niah rows (Parquet) of a cell. (Their metrics JSON are
        each job's own record, which merge_niah does not read.)"""
        return [
            self.paths.niah_part_rows.format(
                niah=wc.niah, cell=wc.cell, model=wc.model, part=f"{i:05d}"
            )
            for i in range(len(self.run.niah[wc.niah].row_ranges()))
        ]

    def task_parts(self, kind: str) -> Callable[[Any], list[str]]:
        """Input function: the part jobs' outputs of a task cut into `parts` (`predictions`
        Parquet or `metrics`), at the job's sweep point."""
        paths = self.paths
        pattern = paths.task_part_predictions if kind == "predictions" else paths.task_part_metrics
        return lambda wc: [
            pattern.format(task=wc.task, point=wc.point, model=wc.model, part=f"{i:05d}")
            for i in range(self.run.tasks[wc.task].parts)
        ]

    def task_part(self, wc: Any) -> str:
        """--part I/N of a part job."""
        return f"{int(wc.part)}/{self.run.tasks[wc.task].parts}"

    def task_merge_settings(self, wc: Any) -> str:
        """A kind's merge's --settings: the task's own (at the job's sweep point) and its
        evaluation (bootstrap), which its model jobs are not given."""
        task = self.task(wc)
        return spec_json(task.settings, task.evaluation)

    def plan_settings(self, wc: Any) -> str:
        """plan-scan's settings: the tiles, chunk_bp and group_bp (not tsv_decimals, which the
        plan does not use: a change of it must not rewrite the plan)."""
        scan = self.run.scans[wc.scan]
        return spec_json(scan.tiles, scan.chunks, exclude=("tsv_decimals",))

    def count_settings(self, wc: Any) -> str:
        """count-scan's settings: the printed precision and the neutral set, all it uses."""
        scan = self.run.scans[wc.scan]
        return quoted_json(
            {
                "neutral_regions": scan.calibration.neutral_regions,
                "tsv_decimals": scan.chunks.tsv_decimals,
            }
        )

    def calibrate_settings(self, wc: Any) -> str:
        """calibrate-scan's settings: the calibration's, but tsv_calibrated (the TSV's columns)."""
        return spec_json(self.run.scans[wc.scan].calibration, exclude=("tsv_calibrated",))

    def tsv_settings(self, wc: Any) -> str:
        """write-scan-tsv's settings: whether the TSV carries the calibrated columns (the rest
        of the calibration reaches it through the calibration folder, an input)."""
        return quoted_json({"tsv_calibrated": self.run.scans[wc.scan].calibration.tsv_calibrated})

    def scan_regions(self, wc: Any) -> str:
        return " ".join(shlex.quote(r) for r in self.run.scans[wc.scan].regions)

    def scan_bed_files(self, wc: Any) -> list[str]:
        """BED files among the scan's regions (inputs of the plan)."""
        return [r for r in self.run.scans[wc.scan].regions if os.path.isfile(r)]

    def scan_model_paths(self, wc: Any) -> str:
        """--model KEY=PATH of the scan's models: the plan estimates GPU-hours for each (at the
        demo model's shape for a --demo-model KEY, one the run builds)."""
        models = self.run.entry_models(self.run.scans[wc.scan])
        flags = [f"--model={k}={self.run.models[k].path}" for k in models]
        flags += [f"--demo-model={k}" for k in models if self.run.models[k].build_demo]
        return " ".join(shlex.quote(flag) for flag in flags)

    def scan_neutral_flag(self, wc: Any) -> str:
        """plan-scan's --neutral-regions (checked against the reference at plan time), or ''."""
        bed = self.run.scans[wc.scan].calibration.neutral_regions
        return shlex.quote(f"--neutral-regions={bed}") if bed else ""

    def scan_neutral_regions(self, wc: Any) -> list[str]:
        """The scan's neutral-regions BED (an input of every merge), if it names one."""
        bed = self.run.scans[wc.scan].calibration.neutral_regions
        return [bed] if bed else []

    # ---- provenance ---------------------------------------------------------------------------
    # What a result records of how it was made. Every item follows from the job's own settings
    # and wildcards, which rerun it when they change anyway; nothing that other config entries
    # or later stages' settings change (no hash of the whole config: any edit would rerun every
    # model job; docs/reproducibility.md#what-reruns-a-job).
    def model_provenance(self, model_key: str) -> dict:
        """What a result records about the model that made it."""
        model = self.run.models[model_key]
        return {
            "model": model.path,
            "revision": model.revision or "default",
            "dtype": model.dtype,
            "upcast_output_layer": model.upcast_output_layer,
        }

    def dataset_provenance(self, wc: Any) -> str:
        items = {"dataset": wc.dataset, "build": self.run.datasets[wc.dataset].build}
        items |= self.model_provenance(wc.model)
        return quoted_json(items | {"settings_sha256": settings_sha256(self.scoring_settings(wc))})

    def task_provenance(self, wc: Any) -> str:
        """The task and model; a sweep job's point too (the command files it under the metrics'
        parameters), so that the rule's command stays the headline's."""
        point = self.sweep_point(wc)
        sweep = {SWEEP_KEY: point.record()} if point else {}
        items = {"task": wc.task} | sweep | self.model_provenance(wc.model)
        return quoted_json(items | {"settings_sha256": settings_sha256(self.task_settings(wc))})

    def niah_provenance(self, wc: Any) -> str:
        items = {"niah": wc.niah, "cell": wc.cell} | self.model_provenance(wc.model)
        return quoted_json(items | {"settings_sha256": settings_sha256(self.niah_settings(wc))})

    def scan_fingerprint(self, wc: Any) -> str:
        """What a scan's counts record of the scores they count (scan.counts.FINGERPRINT_KEYS: the
        model as loaded, the tiles): all that count_scan_file is given, so that a label (the
        build, the scan's other settings) never reruns it."""
        tiles = self.run.scans[wc.scan].tiles
        items = {"tile_bp": tiles.tile_bp, "min_context": tiles.min_context}
        return quoted_json(self.model_provenance(wc.model) | items)

    def scan_provenance(self, wc: Any) -> str:
        """A scan's TSV headers and record: the fingerprint, the scan, its build and the hash
        of the settings its chunks were scored with (the model's and the tiles)."""
        scan = self.run.scans[wc.scan]
        items = {"scan": wc.scan, "build": scan.build, "tile_bp": scan.tiles.tile_bp}
        items["min_context"] = scan.tiles.min_context
        items["settings_sha256"] = settings_sha256(self.model_settings(wc, scan.tiles))
        return quoted_json(items | self.model_provenance(wc.model))
