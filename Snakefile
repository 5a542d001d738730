from snakemake.utils import min_version

min_version("9.19")


configfile: "config/config.yaml"


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
include: "workflow/rules/report.smk"
include: "workflow/rules/export.smk"
include: "workflow/rules/datasets.smk"


rule all:
    input:
        final_outputs(),
