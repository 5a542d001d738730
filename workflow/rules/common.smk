# What the rules share: the config read and checked once, the file patterns, the wildcard
# constraints, and the input, params and resources functions the rules name. The Python behind
# them is the package's (carbon_vep.workflow: targets, jobs, scans; unit-tested); here they are
# bound to this run's config.
import json
import os
import shlex
import sys

from carbon_vep.config.fields import INTERFACE_VARIABLE, ConfigError, spec_json
from carbon_vep.config.workflow import (
    MODEL_RULES,
    check_gpu_profile,
    check_niah_profile,
    unfilled_profile,
    profile_gpu_class,
    read_run_config,
    resolve_baseline,
)
from carbon_vep.estimate.bill import estimate, is_dry_run
from carbon_vep.estimate.table import render
from carbon_vep.report.track_list import track_set
from carbon_vep.scoring.context import check_dataset_contexts
from carbon_vep.workflow.jobs import Jobs
from carbon_vep.workflow.paths import RunPaths
from carbon_vep.workflow.scans import ScanInputs, read_plan
from carbon_vep.workflow.targets import Targets, names_pattern

# the comparison gate's baseline and the published NIAH points are found next to the Snakefile
WORKFLOW_ROOT = os.path.normpath(
    os.path.join(
        workflow.current_basedir.get_path_or_uri(secret_free=True), os.pardir, os.pardir
    )
)
# The config checked against the schema (carbon_vep.config.schema, which also writes
# workflow/schemas/config.schema.yaml), typed with every default filled in (RunConfig), and
# every local input it names found: read as `carbon-vep estimate` reads it, errors naming the
# config file and key. A missing input must stop the run here: Snakemake ignores the missing
# inputs of jobs whose outputs exist, and an old result would stand for the new config.
os.environ[INTERFACE_VARIABLE] = (
    "workflow"  # jobs' errors name config keys, not CLI flags
)
RUN = read_run_config(config, CONFIG_SOURCE, WORKFLOW_ROOT)
PROFILES = {
    name: {k: v.raw for k, v in resources.items()}
    for name, resources in workflow.resource_settings.overwrite_resources.items()
}
for rule_name in MODEL_RULES:
    check_gpu_profile(rule_name, PROFILES.get(rule_name, {}), RUN.models)
check_niah_profile(PROFILES.get("score_niah", {}), RUN)
check_dataset_contexts(RUN)  # windows a local model cannot hold: refused before any job
# a shipped SLURM profile's FILL_IN_ values: refused before any job is submitted (a dry run,
# which submits none, prints the bill and says so)
UNFILLED = unfilled_profile(
    {k: v.raw for k, v in (workflow.resource_settings.default_resources or {}).items()},
    PROFILES,
)
if UNFILLED and workflow.is_main_process:
    if not is_dry_run(sys.argv):
        raise ConfigError(UNFILLED)
    print(f"Note: {UNFILLED}", file=sys.stderr)
# the bill before the run (carbon-vep estimate) heads a dry run's plan; jobs do not reprint it
if workflow.is_main_process and is_dry_run(sys.argv):
    print(render(estimate(RUN, PROFILES)), file=sys.stderr)

BASELINE = resolve_baseline(RUN.baseline, WORKFLOW_ROOT) if RUN.baseline else None
# the published Genomic-NIAH points the report draws beside a run's own
PUBLISHED_NIAH = os.path.normpath(
    os.path.join(WORKFLOW_ROOT, "baselines", "published_niah.yaml")
)
TARGETS = Targets(RUN, BASELINE)
JOBS = Jobs(
    RUN,
    profile_gpu_class(PROFILES.get("score_niah", {})),
    WORKFLOW_ROOT,
    profile_gpu_class(PROFILES.get("score_recovery", {})),
)
SCANS = ScanInputs(RUN)

# every output and log pattern the rules name (carbon_vep.workflow.paths); a job's log is
# PATHS.job_log(folder of its outputs, name)
PATHS = RunPaths(RUN.outdir)
TRACK_NAMES = [track.name for track in track_set(calibrated=True)]


wildcard_constraints:
    # names_pattern: an empty section matches nothing (an empty constraint would match any
    # path, and send a NIAH or task output to the panel rules)
    dataset=names_pattern(list(RUN.datasets)),
    model=names_pattern(list(RUN.models)),
    shard=r"\d{5}",
    scan=names_pattern(list(RUN.scans)),
    chunk=r"\d{5}",
    part=r"\d{5}",
    track="|".join(TRACK_NAMES),
    niah=names_pattern(list(RUN.niah)),
    cell=r"niah_[A-Za-z0-9_]+",
    # an output file of a scan: contig names encoded (@XX), `+N` for shared files
    file=r"[A-Za-z0-9._@+-]+",
    # a tabix index: .csi where a position passes 2^29 bp (carbon_vep.atomic.index_suffix)
    index_kind="tbi|csi",


# ---- input functions that read a checkpoint's output -----------------------------------------
def shard_scores(wildcards):
    """Every shard written by the make_shards checkpoint, scored by this model."""
    # the shards exist once the checkpoint has run
    checkpoints.make_shards.get(dataset=wildcards.dataset)
    shard = PATHS.shard.format(dataset=wildcards.dataset, shard="{shard}")
    shards = glob_wildcards(shard).shard
    return expand(
        PATHS.shard_scores,
        dataset=wildcards.dataset,
        model=wildcards.model,
        shard=sorted(shards),
    )


def scan_plan(wildcards):
    """The plan_scan checkpoint's plan of this scan (chunks, output files)."""
    return read_plan(checkpoints.plan_scan.get(scan=wildcards.scan).output.plan)


def file_chunks(wildcards):
    return SCANS.file_chunks(wildcards, scan_plan(wildcards))


def scan_chunk_stats(wildcards):
    return SCANS.chunk_stats(wildcards, scan_plan(wildcards))


def scan_output_files(kind):
    return lambda wc: SCANS.output_files(wc, scan_plan(wc), kind)


def niah_cell(wildcards):
    """A score_niah job's cell. A Hub cell is read once the fetch_niah_cell checkpoint has
    fetched it: one holding other than its entry's `rows` stops the run before any job scores
    it (a built cell holds `rows` by construction)."""
    if RUN.niah[wildcards.niah].source != "hub":
        return PATHS.niah_cell.format(niah=wildcards.niah, cell=wildcards.cell)
    fetched = checkpoints.fetch_niah_cell.get(niah=wildcards.niah, cell=wildcards.cell)
    return JOBS.checked_niah_cell(wildcards, fetched.output[0])


def vcf_export_indexes(wildcards):
    """Every VCF export's index, of the kind its header calls for: read once the export_vcf
    checkpoint has written it (the reference may be a download, unknown before)."""
    # imported here: 0.35 s, paid only where there are VCFs
    from carbon_vep.report.vcf_export import vcf_index_suffix

    indexes = []
    for dataset, model in TARGETS.vcf_export_keys():
        vcf = checkpoints.export_vcf.get(dataset=dataset, model=model).output.vcf
        indexes.append(vcf + vcf_index_suffix(vcf))
    return indexes
