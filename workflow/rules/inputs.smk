# Verified inputs: each input's sha256, once per dataset, task and model (the model's weights,
# tokenizer and remote code), checked against the config's `sha256:` pins before anything uses
# it, and merged into the provenance of every result.
rule record_dataset_inputs:
    input:
        panel=JOBS.dataset_file("panel"),
        reference=JOBS.dataset_file("reference"),
    output:
        PATHS.dataset_inputs,
    log:
        PATHS.job_log(PATHS.inputs_dir, "dataset_{dataset}"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        pins=lambda wc, input: JOBS.pins(input),
    shell:
        "carbon-vep record-inputs --file {input.panel:q} --file {input.reference:q}"
        " --pins {params.pins} --out {output:q} > {log:q} 2>&1 || {{ tail -n 1 {log:q} >&2; exit 1; }}"


rule record_task_inputs:
    input:
        lambda wc: RUN.tasks[wc.task].path,
    output:
        PATHS.task_inputs,
    log:
        PATHS.job_log(PATHS.inputs_dir, "task_{task}"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        pins=lambda wc, input: JOBS.pins(input),
    shell:
        "carbon-vep record-inputs --file {input:q} --pins {params.pins}"
        " --out {output:q} > {log:q} 2>&1 || {{ tail -n 1 {log:q} >&2; exit 1; }}"


rule record_model_inputs:
    input:
        JOBS.model_sources,
    output:
        PATHS.model_inputs,
    log:
        PATHS.job_log(PATHS.inputs_dir, "model_{model}"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        source=JOBS.model_source_args,
        pins=JOBS.model_pins,
    shell:
        "export HF_HUB_OFFLINE=1; "
        "carbon-vep record-inputs {params.source} --pins {params.pins}"
        " --out {output:q} > {log:q} 2>&1 || {{ tail -n 1 {log:q} >&2; exit 1; }}"
