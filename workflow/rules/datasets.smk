# Public dataset files from the Hugging Face Hub (`hub_files` in config): one head-node rule
# each (internet needed; compute nodes stay offline). Datasets and tasks read them at `out`.
for hub_name, hub_file in RUN.hub_files.items():

    rule:
        name:
            f"fetch_hub_{hub_name}"
        output:
            hub_file.out,
        log:
            PATHS.job_log("", f"fetch_hub_{hub_name}"),
        localrule: True
        conda:
            "../../envs/carbon-vep.yaml"
        params:
            settings=spec_json(hub_file),
        shell:
            "carbon-vep fetch-hub --settings {params.settings} > {log:q} 2>&1"


# Other public files (`downloads` in config, e.g. a reference genome): one head-node rule each,
# from a pinned URL; the file is kept only when its sha256 is the one the config pins.
for url_name, download in RUN.downloads.items():

    rule:
        name:
            f"fetch_url_{url_name}"
        output:
            download.out,
        log:
            PATHS.job_log("", f"fetch_url_{url_name}"),
        localrule: True
        conda:
            "../../envs/carbon-vep.yaml"
        params:
            settings=spec_json(download),
        shell:
            "carbon-vep fetch-url --settings {params.settings} > {log:q} 2>&1"
            " || {{ tail -n 1 {log:q} >&2; exit 1; }}"
