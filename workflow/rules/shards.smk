checkpoint make_shards:
    input:
        checked=rules.check_panel.output.checked,
        reference=JOBS.dataset_file("reference"),
    output:
        shards=directory(f"{OUTDIR}/{{dataset}}/shards"),
    log:
        f"{LOG_DIR}/{{dataset}}/make_shards.log",
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.dataset_settings("scoring", "shards"),
    shell:
        "carbon-vep make-shards --checked {input.checked} --reference {input.reference}"
        " --settings {params.settings} --outdir {output.shards} > {log} 2>&1"
