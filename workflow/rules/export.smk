# The panel with its scores as a VCF: the panel's ID, QUAL, FILTER and requested INFO fields
# (declared as the panel's header declares them), the scores in CVEP_ INFO fields. Its index is
# written with it, not declared: a .tbi, or a .csi where a contig passes 2^29 bp.
rule export_vcf:
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
        " --out {output.vcf:q} > {log:q} 2>&1"
