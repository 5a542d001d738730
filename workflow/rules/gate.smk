# The comparison gate (`baseline:` in config): the run's last rule compares the results table
# with the baseline and fails on drift, so snakemake itself fails. The JUnit XML is declared as
# a log, which Snakemake keeps when the job fails (CI systems display it).
if BASELINE:

    rule compare_baseline:
        input:
            results=rules.make_results_table.output.parquet,
            baseline=BASELINE,
        output:
            f"{OUTDIR}/baseline_comparison.tsv",
        log:
            log=f"{LOG_DIR}/compare_baseline.log",
            junit=f"{OUTDIR}/baseline_comparison.junit.xml",
        conda:
            "../../envs/carbon-vep.yaml"
        shell:
            "carbon-vep compare --baseline {input.baseline} --results {input.results}"
            " --junit {log.junit} --out {output} > {log.log} 2>&1"
