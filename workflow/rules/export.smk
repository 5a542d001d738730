rule export_vcf:
    input:
        merged=rules.merge_scores.output,
        reference=JOBS.dataset_file("reference"),
    output:
        vcf=f"{OUTDIR}/{{dataset}}/{{model}}/results.vcf.gz",
        tbi=f"{OUTDIR}/{{dataset}}/{{model}}/results.vcf.gz.tbi",
    log:
        f"{LOG_DIR}/{{dataset}}/{{model}}/export_vcf.log",
    conda:
        "../../envs/carbon-vep.yaml"
    shell:
        "carbon-vep export-vcf --merged {input.merged} --reference {input.reference}"
        " --out {output.vcf} > {log} 2>&1"
