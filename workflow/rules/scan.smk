rule scan_region:
    input:
        reference=lambda wc: RUN.scans[wc.scan].reference,
        model=model_files,
    output:
        positions=f"{OUTDIR}/scans/{{scan}}/{{model}}/region_{{region}}.positions.parquet",
        snvs=f"{OUTDIR}/scans/{{scan}}/{{model}}/region_{{region}}.snvs.parquet",
    log:
        f"logs/{OUTDIR}/scans/{{scan}}/{{model}}/scan_region_{{region}}.log",
    conda:
        "../../envs/carbon-vep.yaml"
    # a model job like score_shard: a GPU for CUDA models; a cluster profile sets the rest
    resources:
        gpu=gpu_count,
        batch_size=attempt_batch_size,
        mem_mb=16000,
        runtime=120,
    params:
        settings=scan_settings,
        region=lambda wc: RUN.scans[wc.scan].regions[int(wc.region)],
    shell:
        "export HF_HUB_OFFLINE=1; "
        "carbon-vep scan --reference {input.reference} --region {params.region}"
        " --settings {params.settings} --batch-size {resources.batch_size}"
        " --out {output.positions} --snv-out {output.snvs} > {log} 2>&1"


rule export_scan_tabix:
    input:
        snvs=rules.scan_region.output.snvs,
        reference=lambda wc: RUN.scans[wc.scan].reference,
    output:
        tsv=f"{OUTDIR}/scans/{{scan}}/{{model}}/region_{{region}}.snvs.tsv.gz",
        tbi=f"{OUTDIR}/scans/{{scan}}/{{model}}/region_{{region}}.snvs.tsv.gz.tbi",
    log:
        f"logs/{OUTDIR}/scans/{{scan}}/{{model}}/export_scan_tabix_{{region}}.log",
    conda:
        "../../envs/carbon-vep.yaml"
    shell:
        "carbon-vep export-tabix --scores {input.snvs} --reference {input.reference}"
        " --column score --column score_conditional --column p_ref --column p_alt"
        " --out {output.tsv} > {log} 2>&1"
