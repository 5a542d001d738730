checkpoint make_shards:
    input:
        checked=rules.check_panel.output.checked,
        reference=lambda wc: config["datasets"][wc.dataset]["reference"],
    output:
        shards=directory(f"{OUTDIR}/{{dataset}}/shards"),
    log:
        f"logs/{OUTDIR}/{{dataset}}/make_shards.log",
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        recipe=lambda wc: config["datasets"][wc.dataset]["recipe"],
        window_args=window_args,
        shard_size=config["shard_size"],
    shell:
        "carbon-vep make-shards --checked {input.checked} --reference {input.reference}"
        " --recipe {params.recipe} {params.window_args}"
        " --shard-size {params.shard_size} --outdir {output.shards} > {log} 2>&1"
