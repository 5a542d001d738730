# Every panel row gets a status and a reason before any scoring job; an unusable panel (wrong
# build, 0-based positions, no matching contig, nothing scoreable) fails here, with the message
# in the log and on stderr.
rule check_panel:
    input:
        panel=JOBS.dataset_file("panel"),
        reference=JOBS.dataset_file("reference"),
        inputs=DATASET_INPUTS,  # hashed and checked against the pins first
    output:
        checked=f"{OUTDIR}/{{dataset}}/checked.parquet",
        summary=f"{OUTDIR}/{{dataset}}/checked_summary.json",
    log:
        f"{LOG_DIR}/{{dataset}}/check_panel.log",
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.dataset_settings("checks", "labels"),
    shell:
        "carbon-vep check-panel --panel {input.panel} --reference {input.reference}"
        " --settings {params.settings} --out {output.checked} --summary {output.summary}"
        " > {log} 2>&1 || {{ tail -n 1 {log} >&2; exit 1; }}"
