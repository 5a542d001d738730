# Every panel row gets a status and a reason before any scoring job; an unusable panel (wrong
# build, 0-based positions, no matching contig, nothing scoreable) fails here, with the message
# in the log and on stderr.
rule check_panel:
    input:
        panel=JOBS.dataset_file("panel"),
        reference=JOBS.dataset_file("reference"),
        inputs=PATHS.dataset_inputs,  # hashed and checked against the pins first
    output:
        checked=PATHS.checked_panel,
        summary=PATHS.checked_summary,
    log:
        PATHS.job_log(PATHS.dataset_dir, "check_panel"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.dataset_settings("checks", "labels"),
    shell:
        "carbon-vep check-panel --panel {input.panel:q} --reference {input.reference:q}"
        " --settings {params.settings} --out {output.checked:q} --summary {output.summary:q}"
        " > {log:q} 2>&1 || {{ tail -n 1 {log:q} >&2; exit 1; }}"
