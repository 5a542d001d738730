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


# One self-contained HTML page (and a Markdown summary) for the whole run.
rule write_run_report:
    input:
        metrics=run_metrics(),
        rows=run_rows(),
    output:
        html=f"{OUTDIR}/report.html",
        summary=f"{OUTDIR}/summary.md",
    log:
        f"logs/{OUTDIR}/write_run_report.log",
    conda:
        "../../envs/carbon-vep.yaml"
    shell:
        "carbon-vep html-report --metrics {input.metrics}"
        " --out-html {output.html} --out-md {output.summary} > {log} 2>&1"
