rule score_shard:
    input:
        shard=f"{OUTDIR}/{{dataset}}/shards/shard_{{shard}}.parquet",
        reference=JOBS.dataset_file("reference"),
        model=JOBS.model_files,
    output:
        f"{OUTDIR}/{{dataset}}/{{model}}/shard_scores/shard_{{shard}}.parquet",
    log:
        f"{LOG_DIR}/{{dataset}}/{{model}}/score_shard_{{shard}}.log",
    conda:
        "../../envs/carbon-vep.yaml"
    # portable defaults; a cluster profile sets the GPU class, partition, memory and time
    resources:
        gpu=JOBS.gpu_count,
        batch_size=JOBS.attempt_batch_size,
        batch_tokens=JOBS.attempt_batch_tokens,
        mem_mb=16000,
        runtime=120,
    params:
        settings=JOBS.scoring_settings,
    shell:
        # compute nodes are offline: the model comes from the Hub cache (fetch_model) or a dir
        "export HF_HUB_OFFLINE=1; "
        "carbon-vep score-shard --shard {input.shard} --reference {input.reference}"
        " --settings {params.settings} --batch-size {resources.batch_size}"
        " --batch-tokens {resources.batch_tokens}"
        " --out {output} > {log} 2>&1"
