# The comparison gate (`baseline:` in config): the run's last rule compares the results table
# with the baseline and fails on drift, so snakemake itself fails. The JUnit XML is declared as
# a log, which Snakemake keeps when the job fails (CI systems display it).
if BASELINE:

    rule compare_baseline:
        input:
            results=rules.make_results_table.output.parquet,
            baseline=BASELINE,
        output:
            PATHS.baseline_comparison,
        log:
            log=PATHS.job_log(PATHS.outdir, "compare_baseline"),
            junit=PATHS.baseline_junit,
        conda:
            "../../envs/carbon-vep.yaml"
        shell:
            "carbon-vep compare --baseline {input.baseline:q} --results {input.results:q}"
            " --junit {log.junit:q} --out {output:q} > {log.log:q} 2>&1"
