rule export_vcf:
    input:
        merged=rules.merge_scores.output,
        reference=JOBS.dataset_file("reference"),
    output:
        vcf=PATHS.vcf_export,
        tbi=PATHS.vcf_export_index,
    log:
        PATHS.job_log(PATHS.dataset_model_dir, "export_vcf"),
    conda:
        "../../envs/carbon-vep.yaml"
    shell:
        "carbon-vep export-vcf --merged {input.merged} --reference {input.reference}"
        " --out {output.vcf} > {log} 2>&1"
