rule write_report:
    input:
        merged=rules.merge_scores.output,
        metrics=rules.compute_metrics.output.metrics,
    output:
        report(
            PATHS.dataset_report,
            caption="../report/dataset_report.rst",
            category="Datasets",
            labels={"dataset": "{dataset}", "model": "{model}"},
        ),
    log:
        PATHS.job_log(PATHS.dataset_model_dir, "write_report"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        title=lambda wc: f"{wc.dataset} scored by {wc.model}",
    shell:
        "carbon-vep report --merged {input.merged} --metrics {input.metrics}"
        " --title '{params.title}' --out {output} > {log} 2>&1"


# One self-contained HTML page (and a Markdown summary) for the whole run, from what the
# earlier stages wrote: each result's metrics with its row file, the results table, each
# task's sweep points and each scan's calibration.
rule write_run_report:
    input:
        unpack(lambda wc: TARGETS.run_tables()),
        metrics=TARGETS.run_metrics(),
        rows=TARGETS.run_rows(),
        sweeps=TARGETS.sweep_metrics(),
        scans=TARGETS.run_scan_summaries(),
        published_niah=[PUBLISHED_NIAH] if RUN.niah else [],
    output:
        html=report(
            PATHS.run_report,
            caption="../report/run_report.rst",
            category="Run",
            labels={"file": "report.html"},
        ),
        summary=PATHS.run_summary,
    log:
        PATHS.job_log(PATHS.outdir, "write_run_report"),
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
        sweeps=lambda wc, input: " ".join(
            f"--sweep-metrics {path}" for path in input.sweeps
        ),
    shell:
        "carbon-vep html-report --metrics {input.metrics} --rows {input.rows} {params.tables}"
        " {params.scans} {params.published} {params.sweeps} --out-html {output.html}"
        " --out-md {output.summary} > {log} 2>&1"
