# Public dataset files from the Hugging Face Hub (`hub_files` in config): one head-node rule
# each (internet needed; compute nodes stay offline). Datasets and tasks read them at `out`.
for hub_name in config["hub_files"]:

    rule:
        name:
            f"fetch_hub_{hub_name}"
        output:
            config["hub_files"][hub_name]["out"],
        log:
            f"logs/fetch_hub_{hub_name}.log",
        localrule: True
        conda:
            "../../envs/carbon-vep.yaml"
        params:
            hub_args=hub_args(hub_name),
        shell:
            "carbon-vep fetch-hub {params.hub_args} --out {output} > {log} 2>&1"
