checkpoint make_shards:
    input:
        checked=rules.check_panel.output.checked,
        reference=JOBS.dataset_file("reference"),
    output:
        shards=directory(PATHS.shards_dir),
    log:
        PATHS.job_log(PATHS.dataset_dir, "make_shards"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.dataset_settings("scoring", "shards"),
    shell:
        "carbon-vep make-shards --checked {input.checked:q} --reference {input.reference:q}"
        " --settings {params.settings} --outdir {output.shards:q} > {log:q} 2>&1"
