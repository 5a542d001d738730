rule write_report:
    input:
        merged=rules.merge_scores.output,
        metrics=rules.compute_metrics.output,
    output:
        f"{OUTDIR}/{{dataset}}/{{model}}/report.md",
    log:
        f"logs/{OUTDIR}/{{dataset}}/{{model}}/write_report.log",
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        title=lambda wc: f"{wc.dataset} scored by {wc.model}",
    shell:
        "carbon-vep report --merged {input.merged} --metrics {input.metrics}"
        " --title '{params.title}' --out {output} > {log} 2>&1"
