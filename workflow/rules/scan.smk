# Whole-genome (or any regions') scans: plan -> chunk jobs -> merge per output file -> summary.
print(*SCANS.plan_notes(), sep="\n", file=sys.stderr)  # dry runs show the plans


checkpoint plan_scan:
    input:
        reference=lambda wc: RUN.scans[wc.scan].reference,
        beds=JOBS.scan_bed_files,
    output:
        plan=PATHS.scan_plan,
        report=PATHS.scan_plan_report,
    log:
        PATHS.job_log(PATHS.scan_plan_dir, "plan_scan"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.plan_settings,
        regions=JOBS.scan_regions,
        models=JOBS.scan_model_paths,
        neutral=JOBS.scan_neutral_flag,
    shell:
        "carbon-vep plan-scan --reference {input.reference:q} --regions {params.regions}"
        " --settings {params.settings} {params.models} {params.neutral}"
        " --title {wildcards.scan} --out {output.plan:q} --report {output.report:q}"
        " > {log:q} 2>&1"


# The jobs after the plan read it as ancient(): a plan rewritten (another group_bp, a model
# added to the estimates) does not rerun them by its date. Each job's own part of the plan is
# its params' `plan` (a fingerprint), which reruns it when that part changed (docs/scans.md).
rule scan_chunk:
    input:
        plan=ancient(PATHS.scan_plan),
        reference=lambda wc: RUN.scans[wc.scan].reference,
        model=JOBS.model_files,
    output:
        chunk=temp(PATHS.scan_chunk),
        stats=PATHS.scan_chunk_stats,
    log:
        PATHS.job_log(PATHS.scan_dir, "scan_chunk_{chunk}"),
    conda:
        "../../envs/carbon-vep.yaml"
    # a model job like score_shard: a GPU for CUDA models; a cluster profile sets the rest
    resources:
        **JOBS.model_resources(),
    params:
        settings=JOBS.model_settings,
        plan=SCANS.chunk_key,
    shell:
        "export HF_HUB_OFFLINE=1; "
        "carbon-vep scan-chunk --plan {input.plan:q} --chunk {wildcards.chunk}"
        " --reference {input.reference:q} --settings {params.settings}"
        " --batch-size {resources.batch_size}"
        " --batch-tokens {resources.batch_tokens} --out {output.chunk:q}"
        " --stats {output.stats:q} > {log:q} 2>&1"


# one job per output file: a large contig alone, or small contigs together (the plan's `files`)
rule merge_scan_file:
    input:
        plan=ancient(PATHS.scan_plan),
        chunks=file_chunks,
    output:
        parquet=PATHS.scan_positions,
    log:
        PATHS.job_log(PATHS.scan_dir, "merge_scan_file_{file}"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        plan=SCANS.file_key,
    shell:
        "carbon-vep merge-scan --plan {input.plan:q} --file {wildcards.file:q}"
        " --chunks {input.chunks:q} --out-parquet {output.parquet:q} > {log:q} 2>&1"


# an output file's SNVs counted per context cell and score, at the TSV's precision: apart from
# the merge, so that tsv_decimals or the neutral set recount the file, not the chunks again
rule count_scan_file:
    input:
        parquet=PATHS.scan_positions,
        reference=lambda wc: RUN.scans[wc.scan].reference,
        neutral=JOBS.scan_neutral_regions,
    output:
        counts=PATHS.scan_calibration_counts,
    log:
        PATHS.job_log(PATHS.scan_dir, "count_scan_file_{file}"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.count_settings,
        provenance=JOBS.scan_fingerprint,
    shell:
        "carbon-vep count-scan --parquet {input.parquet:q} --reference {input.reference:q}"
        " --settings {params.settings} --provenance {params.provenance}"
        " --out-counts {output.counts:q} > {log:q} 2>&1"


# every output file's counts -> the scan's rank scales (PHRED) and context means
rule calibrate_scan:
    input:
        counts=scan_output_files("counts"),
    output:
        json=PATHS.scan_calibration_json,
        tables=PATHS.scan_calibration_tables,
    log:
        PATHS.job_log(PATHS.scan_dir, "calibrate_scan"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.calibrate_settings,
        folder=lambda wc, output: os.path.dirname(output.json),
    shell:
        "carbon-vep calibrate-scan --counts {input.counts:q} --settings {params.settings}"
        " --out {params.folder:q} > {log:q} 2>&1"


# The TSV is written without its index: index_scan_tsv writes it, a declared output, so that
# Snakemake stamps it after the TSV (htslib warns of an index older than its data). One
# cluster job with it (`group`): the index reads the file as the job's own index did.
rule write_scan_tsv:
    input:
        plan=ancient(PATHS.scan_plan),
        parquet=PATHS.scan_positions,
        calibration=PATHS.scan_calibration_json,
        reference=lambda wc: RUN.scans[wc.scan].reference,
    output:
        tsv=PATHS.scan_snvs,
    log:
        PATHS.job_log(PATHS.scan_dir, "write_scan_tsv_{file}"),
    group:
        "scan_tsv"
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        plan=SCANS.file_key,
        settings=JOBS.tsv_settings,
        provenance=JOBS.scan_provenance,
        calibration=lambda wc, input: os.path.dirname(input.calibration),
    shell:
        "carbon-vep write-scan-tsv --plan {input.plan:q} --file {wildcards.file:q}"
        " --parquet {input.parquet:q} --calibration {params.calibration:q}"
        " --reference {input.reference:q} --settings {params.settings}"
        " --provenance {params.provenance} --out-tsv {output.tsv:q} --no-index > {log:q} 2>&1"


# a .tbi, or a .csi where a contig of the file passes 2^29 bp (a .tbi cannot hold it): the
# kind the plan names (`files[].index`), asked for by summarize_scan, which every reader of
# the TSVs in the workflow comes after
rule index_scan_tsv:
    input:
        tsv=PATHS.scan_snvs,
    output:
        index=PATHS.scan_snvs_index,
    log:
        PATHS.job_log(PATHS.scan_dir, "index_scan_tsv_{file}.{index_kind}"),
    group:
        "scan_tsv"
    conda:
        "../../envs/carbon-vep.yaml"
    shell:
        "carbon-vep index-tabix --file {input.tsv:q} --out {output.index:q} > {log:q} 2>&1"


rule summarize_scan:
    input:
        plan=PATHS.scan_plan,
        stats=scan_chunk_stats,
        parquet=scan_output_files("parquet"),
        tsv=scan_output_files("tsv"),
        indexes=scan_output_files("index"),
        calibration=PATHS.scan_calibration_json,
    output:
        json=PATHS.scan_summary,
        record=PATHS.scan_record,
        md=report(
            PATHS.scan_summary_md,
            caption="../report/scan_summary.rst",
            category="Scans",
            labels={"scan": "{scan}", "model": "{model}"},
        ),
    log:
        PATHS.job_log(PATHS.scan_dir, "summarize_scan"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        provenance=JOBS.scan_provenance,
        calibration=lambda wc, input: os.path.dirname(input.calibration),
    shell:
        "carbon-vep summarize-scan --plan {input.plan:q} --chunk-stats {input.stats:q}"
        " --parquet {input.parquet:q} --tsv {input.tsv:q}"
        " --calibration {params.calibration:q} --title '{wildcards.scan} / {wildcards.model}'"
        " --provenance {params.provenance} --out-json {output.json:q}"
        " --out-md {output.md:q} --out-record {output.record:q} > {log:q} 2>&1"


# Genome-browser tracks of a scan (`tracks: true`; docs/tracks.md): one job a bigWig (per
# alternative base, PHRED, max, surprise), then the UCSC track hub and IGV sessions beside them.
rule export_track:
    input:
        summary=PATHS.scan_summary,
    output:
        PATHS.scan_track,
    log:
        PATHS.job_log(PATHS.scan_dir, "export_track_{track}"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        scan=lambda wc, input: os.path.dirname(input.summary),
        out=lambda wc, output: os.path.dirname(output[0]),
    shell:
        "carbon-vep export-tracks --scan {params.scan:q} --out {params.out:q}"
        " --track {wildcards.track} > {log:q} 2>&1"


rule write_track_hub:
    input:
        summary=PATHS.scan_summary,
        tracks=expand(PATHS.scan_track, track=TRACK_NAMES, allow_missing=True),
    output:
        hub=PATHS.scan_track_hub,
        summary=PATHS.scan_tracks_summary,
    log:
        PATHS.job_log(PATHS.scan_dir, "write_track_hub"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        scan=lambda wc, input: os.path.dirname(input.summary),
        out=lambda wc, output: os.path.dirname(output.hub),
        reference=lambda wc: RUN.scans[wc.scan].tracks_reference,
    shell:
        "carbon-vep export-tracks --scan {params.scan:q} --out {params.out:q} --hub-only"
        " --reference-mode {params.reference} > {log:q} 2>&1"


# A dataset with recipe from_scan: its panel looked up in the scan's outputs, no model (the
# scan's build is the dataset's: RunConfig checks it)
rule annotate_from_scan:
    input:
        checked=rules.check_panel.output.checked,
        summary=JOBS.lookup_scan_file(PATHS.scan_summary),
        record=JOBS.lookup_scan_file(PATHS.scan_record),
        calibration=JOBS.lookup_scan_file(PATHS.scan_calibration_json),
    output:
        PATHS.scores,
    log:
        PATHS.job_log(PATHS.dataset_model_dir, "annotate_from_scan"),
    wildcard_constraints:
        dataset=TARGETS.dataset_pattern(lookup=True),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        scan=JOBS.lookup_scan_dir,
    shell:
        "carbon-vep annotate --scan {params.scan:q} --checked {input.checked:q}"
        " --out {output:q} > {log:q} 2>&1"
