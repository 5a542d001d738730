rule compute_metrics:
    input:
        rules.merge_scores.output,
    output:
        f"{OUTDIR}/{{dataset}}/{{model}}/metrics.json",
    log:
        f"logs/{OUTDIR}/{{dataset}}/{{model}}/compute_metrics.log",
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=dataset_settings("labels", "metrics"),
        provenance=dataset_provenance,
    shell:
        "carbon-vep metrics --merged {input} --settings {params.settings}"
        " --task {wildcards.dataset} --model-key {wildcards.model}"
        " --provenance {params.provenance} --out {output} > {log} 2>&1"
