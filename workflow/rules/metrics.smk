rule compute_metrics:
    input:
        merged=rules.merge_scores.output[0],
        dataset_inputs=PATHS.dataset_inputs,
        model_inputs=PATHS.model_inputs,
    output:
        metrics=PATHS.metrics,
        evaluated=PATHS.evaluated,
    log:
        PATHS.job_log(PATHS.dataset_model_dir, "compute_metrics"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.dataset_settings("labels", "metrics"),
        provenance=JOBS.dataset_provenance,
    shell:
        "carbon-vep metrics --merged {input.merged:q} --settings {params.settings}"
        " --task {wildcards.dataset} --model-key {wildcards.model}"
        " --provenance {params.provenance} --provenance @{input.dataset_inputs:q}"
        " --provenance @{input.model_inputs:q} --out {output.metrics:q}"
        " --rows-out {output.evaluated:q} > {log:q} 2>&1"
