rule score_shard:
    input:
        shard=PATHS.shard,
        reference=JOBS.dataset_file("reference"),
        model=JOBS.model_files,
    output:
        PATHS.shard_scores,
    log:
        PATHS.job_log(PATHS.dataset_model_dir, "score_shard_{shard}"),
    conda:
        "../../envs/carbon-vep.yaml"
    # GPUs, batch sizes halved on retry, host memory from the weights (every model rule's
    # resources: JOBS.model_resources); a cluster profile sets the GPU class, partition, time
    resources:
        **JOBS.model_resources(),
    params:
        settings=JOBS.scoring_settings,
    shell:
        # compute nodes are offline: the model comes from the Hub cache (fetch_model) or a dir
        "export HF_HUB_OFFLINE=1; "
        "carbon-vep score-shard --shard {input.shard:q} --reference {input.reference:q}"
        " --settings {params.settings} --batch-size {resources.batch_size}"
        " --batch-tokens {resources.batch_tokens}"
        " --out {output:q} > {log:q} 2>&1"
