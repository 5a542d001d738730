# Genomic-NIAH, the suite's long-context task (`niah:` in the config): each entry's cells (a
# task at a context) are fetched from the Hub on the head node or built from a genome; a cell's
# rows are cut into model jobs (rows_per_job), merged per cell into predictions and metrics.
# The metrics' intervals are the merge's (a CPU job): a model job's own metrics JSON holds point
# estimates and its engine's parameters, whatever the config's `bootstrap`, so changing that
# reruns merge_niah alone (JOBS.niah_settings).


# a checkpoint: score_niah's jobs read the fetched cell's row count (common.smk: niah_cell)
checkpoint fetch_niah_cell:
    output:
        PATHS.niah_cell,
    log:
        PATHS.job_log(PATHS.niah_dir, "fetch_{cell}"),
    wildcard_constraints:
        niah=TARGETS.niah_pattern("hub"),
    localrule: True
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.niah_hub_settings,
    shell:
        "carbon-vep fetch-hub --settings {params.settings} > {log:q} 2>&1"


rule build_niah_cell:
    input:
        reference=lambda wc: RUN.niah[wc.niah].reference,
    output:
        PATHS.niah_cell,
    log:
        PATHS.job_log(PATHS.niah_dir, "build_{cell}"),
    wildcard_constraints:
        niah=TARGETS.niah_pattern("build"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        args=JOBS.niah_build_args,
    shell:
        "carbon-vep build-niah --reference {input.reference:q} {params.args}"
        " --out {output:q} > {log:q} 2>&1"


rule record_niah_inputs:
    input:
        PATHS.niah_cell,
    output:
        PATHS.niah_inputs,
    log:
        PATHS.job_log(PATHS.inputs_dir, "niah_{niah}.{cell}"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        pins=lambda wc, input: JOBS.pins(input),
    shell:
        "carbon-vep record-inputs --file {input:q} --pins {params.pins} --out {output:q}"
        " > {log:q} 2>&1 || {{ tail -n 1 {log:q} >&2; exit 1; }}"


rule score_niah:
    input:
        cell=niah_cell,
        model=JOBS.model_files,
    output:
        rows=PATHS.niah_part_rows,
        metrics=PATHS.niah_part_metrics,
    log:
        PATHS.job_log(PATHS.niah_result, "score_niah_{part}"),
    conda:
        "../../envs/carbon-vep.yaml"
    # a model job like score_shard; GPU memory and time follow from the model and the context
    # (engine vllm: the vLLM environment's carbon-vep, tensor_parallel_size GPUs)
    resources:
        **JOBS.model_resources(generation=True, runtime=JOBS.niah_runtime),
    params:
        exe=JOBS.generation_command,
        settings=JOBS.niah_settings,
        rows=JOBS.niah_rows,
        provenance=JOBS.niah_provenance,
    shell:
        "export HF_HUB_OFFLINE=1; "
        "{params.exe} score-niah --tasks-file {input.cell:q} --row-range {params.rows}"
        " --settings {params.settings} --batch-size {resources.batch_size}"
        " --batch-tokens {resources.batch_tokens} --task {wildcards.niah}.{wildcards.cell}"
        " --model-key {wildcards.model} --provenance {params.provenance}"
        " --provenance @{input.model:q} --out {output.rows:q} --metrics {output.metrics:q}"
        " > {log:q} 2>&1"


rule merge_niah:
    input:
        cell=PATHS.niah_cell,
        parts=JOBS.niah_parts,
        cell_inputs=PATHS.niah_inputs,
        model=JOBS.model_files,
    output:
        predictions=PATHS.niah_predictions,
        metrics=PATHS.niah_metrics,
    log:
        PATHS.job_log(PATHS.niah_result, "merge_niah"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=lambda wc: spec_json(RUN.niah[wc.niah].evaluation),
        parameters=lambda wc: shlex.quote(
            json.dumps(RUN.niah[wc.niah].parameters(wc.cell))
        ),
        provenance=JOBS.niah_provenance,
    shell:
        "carbon-vep merge-niah --cell {input.cell:q} --parts {input.parts:q}"
        " --settings {params.settings} --task {wildcards.niah}.{wildcards.cell}"
        " --model-key {wildcards.model} --parameters {params.parameters}"
        " --provenance {params.provenance} --provenance @{input.cell_inputs:q}"
        " --provenance @{input.model:q} --out {output.predictions:q}"
        " --metrics {output.metrics:q} > {log:q} 2>&1"
