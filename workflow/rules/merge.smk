rule merge_scores:
    input:
        checked=rules.check_panel.output.checked,
        scores=shard_scores,
    output:
        PATHS.scores,
    log:
        PATHS.job_log(PATHS.dataset_model_dir, "merge_scores"),
    wildcard_constraints:
        dataset=TARGETS.dataset_pattern(lookup=False),
    conda:
        "../../envs/carbon-vep.yaml"
    shell:
        "carbon-vep merge --checked {input.checked:q} --scores {input.scores:q}"
        " --out {output:q} > {log:q} 2>&1"
