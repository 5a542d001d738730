rule write_report:
    input:
        merged=rules.merge_scores.output,
        metrics=rules.compute_metrics.output.metrics,
    output:
        report(
            f"{OUTDIR}/{{dataset}}/{{model}}/report.md",
            caption="../report/dataset_report.rst",
            category="Datasets",
            labels={"dataset": "{dataset}", "model": "{model}"},
        ),
    log:
        f"{LOG_DIR}/{{dataset}}/{{model}}/write_report.log",
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        title=lambda wc: f"{wc.dataset} scored by {wc.model}",
    shell:
        "carbon-vep report --merged {input.merged} --metrics {input.metrics}"
        " --title '{params.title}' --out {output} > {log} 2>&1"


# One self-contained HTML page (and a Markdown summary) for the whole run, from what the
# earlier stages wrote: each result's metrics with its row file, the results table, and each
# scan's calibration.
rule write_run_report:
    input:
        unpack(lambda wc: TARGETS.run_tables()),
        metrics=TARGETS.run_metrics(),
        rows=TARGETS.run_rows(),
        scans=[f"{folder}/summary.json" for folder in TARGETS.run_scan_dirs()],
        published_niah=[PUBLISHED_NIAH] if RUN.niah else [],
    output:
        html=report(
            f"{OUTDIR}/report.html",
            caption="../report/run_report.rst",
            category="Run",
            labels={"file": "report.html"},
        ),
        summary=f"{OUTDIR}/summary.md",
    log:
        f"{LOG_DIR}/write_run_report.log",
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        tables=lambda wc, input: (
            f"--results-table {input.table} --results-table-md {input.table_md}"
            if "table" in input.keys()
            else ""
        ),
        scans=" ".join(f"--scan {folder}" for folder in TARGETS.run_scan_dirs()),
        published=lambda wc, input: " ".join(
            f"--published-niah {path}" for path in input.published_niah
        ),
    shell:
        "carbon-vep html-report --metrics {input.metrics} --rows {input.rows} {params.tables}"
        " {params.scans} {params.published} --out-html {output.html}"
        " --out-md {output.summary} > {log} 2>&1"
