rule score_shard:
    input:
        shard=f"{OUTDIR}/{{dataset}}/shards/shard_{{shard}}.parquet",
        reference=lambda wc: config["datasets"][wc.dataset]["reference"],
        model=model_files,
    output:
        f"{OUTDIR}/{{dataset}}/{{model}}/shard_scores/shard_{{shard}}.parquet",
    log:
        f"logs/{OUTDIR}/{{dataset}}/{{model}}/score_shard_{{shard}}.log",
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        model_args=model_args,
        recipe_args=recipe_args,
    shell:
        "carbon-vep score-shard --shard {input.shard} --reference {input.reference}"
        " {params.model_args} {params.recipe_args} --out {output} > {log} 2>&1"
