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
        label_args=label_args,
        metric_args=metric_args,
        provenance_args=provenance_args,
    shell:
        "carbon-vep metrics --merged {input} {params.label_args} {params.metric_args}"
        " {params.provenance_args} --out {output} > {log} 2>&1"
