rule compute_metrics:
    input:
        merged=rules.merge_scores.output[0],
        dataset_inputs=DATASET_INPUTS,
        model_inputs=MODEL_INPUTS,
    output:
        metrics=f"{OUTDIR}/{{dataset}}/{{model}}/metrics.json",
        evaluated=f"{OUTDIR}/{{dataset}}/{{model}}/evaluated.parquet",
    log:
        f"{LOG_DIR}/{{dataset}}/{{model}}/compute_metrics.log",
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.dataset_settings("labels", "metrics"),
        provenance=JOBS.dataset_provenance,
    shell:
        "carbon-vep metrics --merged {input.merged} --settings {params.settings}"
        " --task {wildcards.dataset} --model-key {wildcards.model}"
        " --provenance {params.provenance} --provenance @{input.dataset_inputs}"
        " --provenance @{input.model_inputs} --out {output.metrics}"
        " --rows-out {output.evaluated} > {log} 2>&1"
