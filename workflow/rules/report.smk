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
        "carbon-vep report --merged {input.merged:q} --metrics {input.metrics:q}"
        " --title '{params.title}' --out {output:q} > {log:q} 2>&1"


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
        # paths the user names (outdir): quoted here, as `:q` quotes the rules' own
        tables=lambda wc, input: (
            shlex.join(
                ["--results-table", input.table, "--results-table-md", input.table_md]
            )
            if "table" in input.keys()
            else ""
        ),
        scans=shlex.join(
            arg for folder in TARGETS.run_scan_dirs() for arg in ("--scan", folder)
        ),
        published=lambda wc, input: shlex.join(
            arg for path in input.published_niah for arg in ("--published-niah", path)
        ),
        sweeps=lambda wc, input: shlex.join(
            arg for path in input.sweeps for arg in ("--sweep-metrics", path)
        ),
    shell:
        "carbon-vep html-report --metrics {input.metrics:q} --rows {input.rows:q} {params.tables}"
        " {params.scans} {params.published} {params.sweeps} --out-html {output.html:q}"
        " --out-md {output.summary:q} > {log:q} 2>&1"
