from snakemake.utils import min_version

from carbon_vep.config.workflow import demo_config, resolve_shipped_resources

min_version("9.19")


# A config given with --configfile / --config defines the run alone. With none, the demo runs
# (config/config.yaml, its resources found next to this Snakefile, wherever snakemake runs); to
# add the demo to a config of your own, give both: --configfile config/config.yaml mine.yaml
# Paths to the shipped inputs (resources/demo/, resources/genome/) resolve next to this Snakefile.
WORKFLOW_DIR = workflow.current_basedir.get_path_or_uri(secret_free=True)
if not config:
    config.update(demo_config(WORKFLOW_DIR))
config.update(resolve_shipped_resources(config, WORKFLOW_DIR))


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/models.smk"
include: "workflow/rules/ingest.smk"
include: "workflow/rules/shards.smk"
include: "workflow/rules/scoring.smk"
include: "workflow/rules/scan.smk"
include: "workflow/rules/merge.smk"
include: "workflow/rules/metrics.smk"
include: "workflow/rules/suite.smk"
include: "workflow/rules/niah.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/export.smk"
include: "workflow/rules/datasets.smk"
include: "workflow/rules/inputs.smk"
include: "workflow/rules/gate.smk"


rule all:
    input:
        TARGETS.final_outputs(),
