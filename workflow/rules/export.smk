# The panel with its scores as a VCF: the panel's ID, QUAL, FILTER and requested INFO fields
# (declared as the panel's header declares them), the scores in CVEP_ INFO fields. Written
# without its index: a checkpoint, so that `all` can ask for the index its header calls for.
checkpoint export_vcf:
    input:
        merged=rules.merge_scores.output,
        panel=JOBS.dataset_file("panel"),
        reference=JOBS.dataset_file("reference"),
    output:
        vcf=PATHS.vcf_export,
    log:
        PATHS.job_log(PATHS.dataset_model_dir, "export_vcf"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.dataset_settings("checks"),
    shell:
        "carbon-vep export-vcf --merged {input.merged:q} --panel {input.panel:q}"
        " --reference {input.reference:q} --settings {params.settings}"
        " --out {output.vcf:q} --no-index > {log:q} 2>&1"


# The VCF's index, declared so that Snakemake stamps it after the VCF (htslib warns of an
# index older than its data): a .tbi, or a .csi where a contig of the reference passes 2^29 bp
# (`vcf_export_indexes`). On the head node: a panel's VCF indexes in seconds, and a job of
# its own would wait in the queue after export_vcf's.
rule index_vcf:
    input:
        vcf=PATHS.vcf_export,
    output:
        index=PATHS.vcf_export_index,
    log:
        PATHS.job_log(PATHS.dataset_model_dir, "index_vcf.{index_kind}"),
    localrule: True
    conda:
        "../../envs/carbon-vep.yaml"
    shell:
        "carbon-vep index-tabix --file {input.vcf:q} --out {output.index:q} > {log:q} 2>&1"
