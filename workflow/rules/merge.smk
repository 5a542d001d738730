rule merge_scores:
    input:
        checked=rules.check_panel.output.checked,
        scores=shard_scores,
    output:
        f"{OUTDIR}/{{dataset}}/{{model}}/scores.parquet",
    log:
        f"{LOG_DIR}/{{dataset}}/{{model}}/merge_scores.log",
    wildcard_constraints:
        dataset=TARGETS.dataset_pattern(lookup=False),
    conda:
        "../../envs/carbon-vep.yaml"
    shell:
        "carbon-vep merge --checked {input.checked} --scores {input.scores}"
        " --out {output} > {log} 2>&1"
