# Zero-shot suite tasks beyond variant panels, and the results table of the whole run. Two
# rules a task kind, named as carbon_vep.config.tasks declares them (docs/adding-a-task.md):
# its model rule, whose tasks and resources follow from the declaration, looked up by the
# rule's name (a generation kind runs the engine's carbon-vep, JOBS.generation_command), and
# its merge, a CPU job. The model jobs write parts of the rows (a task entry's `parts`, one by
# default; sequence recovery alone is cut into more), each with its own metrics JSON of point
# estimates; the merge joins the parts into the table and computes the metrics one job would
# write, with the intervals: the evaluation settings are the merge's alone, so changing
# `bootstrap` reruns no model job. Every kind writes its headline and each sweep point through
# one pattern (`{point}`: empty, or the point's folder; a kind without sweeps has the headline
# alone), a point's settings and provenance from JOBS, so the headline's command is unchanged.
rule score_recovery:
    input:
        tasks=lambda wc: RUN.tasks[wc.task].path,
        task_inputs=PATHS.task_inputs,
        model=JOBS.model_files,
    output:
        predictions=PATHS.task_part_predictions,
        metrics=PATHS.task_part_metrics,
    log:
        PATHS.job_log(PATHS.task_point_dir, "score_recovery_{part}"),
    wildcard_constraints:
        task=TARGETS.rule_task_pattern("score_recovery"),
        point=TARGETS.rule_point_pattern("score_recovery"),
    conda:
        "../../envs/carbon-vep.yaml"
    # a model job like score_shard: a GPU for CUDA models (engine vllm: tensor_parallel_size
    # GPUs, the vLLM environment's carbon-vep); a cluster profile sets the rest. One job a
    # part of the rows (a task entry's `parts`), merged by merge_recovery; its metrics JSON
    # holds the draft's counts, which the merge sums
    resources:
        **JOBS.task_resources("score_recovery"),
    params:
        exe=JOBS.generation_command,
        settings=JOBS.task_settings,
        part=JOBS.task_part,
        provenance=JOBS.task_provenance,
    shell:
        # compute nodes are offline: the model comes from the Hub cache (fetch_model) or a dir
        "export HF_HUB_OFFLINE=1; "
        "{params.exe} score-recovery --tasks-file {input.tasks:q} --settings {params.settings}"
        " --part {params.part} --batch-size {resources.batch_size}"
        " --batch-tokens {resources.batch_tokens} --task {wildcards.task}"
        " --model-key {wildcards.model} --provenance {params.provenance}"
        " --provenance @{input.task_inputs:q} --provenance @{input.model:q}"
        " --out {output.predictions:q} --metrics {output.metrics:q} > {log:q} 2>&1"


rule merge_recovery:
    input:
        tasks=lambda wc: RUN.tasks[wc.task].path,
        parts=JOBS.task_parts("predictions"),
        part_metrics=JOBS.task_parts("metrics"),
        task_inputs=PATHS.task_inputs,
        model=JOBS.model_files,
    output:
        predictions=PATHS.task_point_predictions,
        metrics=PATHS.task_point_metrics,
    log:
        PATHS.job_log(PATHS.task_point_dir, "merge_recovery"),
    wildcard_constraints:
        task=TARGETS.rule_task_pattern("score_recovery"),
        point=TARGETS.rule_point_pattern("score_recovery"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.task_merge_settings,
        provenance=JOBS.task_provenance,
    shell:
        "carbon-vep merge-recovery --tasks-file {input.tasks:q} --parts {input.parts:q}"
        " --part-metrics {input.part_metrics:q} --settings {params.settings}"
        " --task {wildcards.task} --model-key {wildcards.model}"
        " --provenance {params.provenance} --provenance @{input.task_inputs:q}"
        " --provenance @{input.model:q} --out {output.predictions:q}"
        " --metrics {output.metrics:q} > {log:q} 2>&1"


rule score_perturbation:
    input:
        tasks=lambda wc: RUN.tasks[wc.task].path,
        task_inputs=PATHS.task_inputs,
        model=JOBS.model_files,
    output:
        predictions=PATHS.task_part_predictions,
        metrics=PATHS.task_part_metrics,
    log:
        PATHS.job_log(PATHS.task_point_dir, "score_perturbation_{part}"),
    wildcard_constraints:
        task=TARGETS.rule_task_pattern("score_perturbation"),
        point=TARGETS.rule_point_pattern("score_perturbation"),
    conda:
        "../../envs/carbon-vep.yaml"
    # a model job like score_shard: a GPU for CUDA models; a cluster profile sets the rest. One
    # job a task (a part of all its rows), merged by merge_perturbation
    resources:
        **JOBS.task_resources("score_perturbation"),
    params:
        settings=JOBS.task_settings,
        provenance=JOBS.task_provenance,
    shell:
        # compute nodes are offline: the model comes from the Hub cache (fetch_model) or a dir
        "export HF_HUB_OFFLINE=1; "
        "carbon-vep score-perturbation --tasks-file {input.tasks:q} --settings {params.settings}"
        " --batch-size {resources.batch_size}"
        " --batch-tokens {resources.batch_tokens} --task {wildcards.task}"
        " --model-key {wildcards.model} --provenance {params.provenance}"
        " --provenance @{input.task_inputs:q} --provenance @{input.model:q}"
        " --out {output.predictions:q} --metrics {output.metrics:q} > {log:q} 2>&1"


rule merge_perturbation:
    input:
        tasks=lambda wc: RUN.tasks[wc.task].path,
        parts=JOBS.task_parts("predictions"),
        task_inputs=PATHS.task_inputs,
        model=JOBS.model_files,
    output:
        predictions=PATHS.task_point_predictions,
        metrics=PATHS.task_point_metrics,
    log:
        PATHS.job_log(PATHS.task_point_dir, "merge_perturbation"),
    wildcard_constraints:
        task=TARGETS.rule_task_pattern("score_perturbation"),
        point=TARGETS.rule_point_pattern("score_perturbation"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.task_merge_settings,
        provenance=JOBS.task_provenance,
    shell:
        "carbon-vep merge-perturbation --tasks-file {input.tasks:q} --parts {input.parts:q}"
        " --settings {params.settings} --task {wildcards.task}"
        " --model-key {wildcards.model} --provenance {params.provenance}"
        " --provenance @{input.task_inputs:q} --provenance @{input.model:q}"
        " --out {output.predictions:q} --metrics {output.metrics:q} > {log:q} 2>&1"


rule make_results_table:
    input:
        TARGETS.run_metrics(),
    output:
        parquet=PATHS.results_table,
        tsv=report(
            PATHS.results_table_tsv,
            caption="../report/results_table.rst",
            category="Run",
            labels={"file": "results_table.tsv"},
        ),
        md=PATHS.results_table_md,
    log:
        PATHS.job_log(PATHS.outdir, "make_results_table"),
    conda:
        "../../envs/carbon-vep.yaml"
    shell:
        "carbon-vep results-table --metrics {input:q} --out-parquet {output.parquet:q}"
        " --out-tsv {output.tsv:q} --out-md {output.md:q} > {log:q} 2>&1"
