from snakemake.utils import min_version

from carbon_vep.config.workflow import (
    config_source,
    demo_config_path,
    resolve_shipped_resources,
    wants_demo,
)

min_version("9.19")


# With no --configfile, the demo runs (config/config.yaml, its resources found next to this
# Snakefile, wherever snakemake runs), with --config and a profile's `config:` laid over it; a
# config file given with --configfile defines the run alone (to add the demo to a config of
# your own, give both: --configfile config/config.yaml mine.yaml).
# Paths to the shipped inputs (resources/demo/, resources/genome/) resolve next to this Snakefile.
WORKFLOW_DIR = workflow.current_basedir.get_path_or_uri(secret_free=True)
if wants_demo(
    config, workflow.config_settings.configfiles, workflow.config_settings.config
):

    configfile: demo_config_path(WORKFLOW_DIR)


CONFIG_SOURCE = config_source(workflow.configfiles, workflow.config_settings.config)
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
        vcf_export_indexes,
