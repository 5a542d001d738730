# One build rule per configured demo model (`build_demo: true`): built locally, no download.
for demo_name, demo_path in JOBS.demo_model_paths.items():

    rule:
        name:
            f"build_demo_model_{demo_name}"
        output:
            directory(demo_path),
        log:
            PATHS.job_log("", f"build_demo_model_{demo_name}"),
        conda:
            "../../envs/carbon-vep.yaml"
        shell:
            "carbon-vep build-demo-model --out {output:q} > {log:q} 2>&1"


# A model given as a Hub id is fetched (weights, tokenizer, remote code) into the local Hub
# cache on the head node, the one machine with internet; scoring jobs then run offline.
rule fetch_model:
    output:
        PATHS.hub_model_record,
    log:
        PATHS.job_log(PATHS.hub_dir, "{model}.json"),
    localrule: True
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=lambda wc: spec_json(JOBS.hub_models[wc.model]),
    shell:
        "carbon-vep fetch-model --settings {params.settings} --out {output:q} > {log:q} 2>&1"
