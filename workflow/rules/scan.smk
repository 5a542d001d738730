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
        "carbon-vep plan-scan --reference {input.reference} --regions {params.regions}"
        " --settings {params.settings} {params.models} {params.neutral} --title {wildcards.scan}"
        " --out {output.plan} --report {output.report} > {log} 2>&1"


rule scan_chunk:
    input:
        plan=PATHS.scan_plan,
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
    shell:
        "export HF_HUB_OFFLINE=1; "
        "carbon-vep scan-chunk --plan {input.plan} --chunk {wildcards.chunk}"
        " --reference {input.reference} --settings {params.settings}"
        " --batch-size {resources.batch_size}"
        " --batch-tokens {resources.batch_tokens} --out {output.chunk} --stats {output.stats}"
        " > {log} 2>&1"


# one job per output file: a large contig alone, or small contigs together (the plan's `files`)
rule merge_scan_file:
    input:
        plan=PATHS.scan_plan,
        chunks=file_chunks,
        reference=lambda wc: RUN.scans[wc.scan].reference,
        neutral=JOBS.scan_neutral_regions,
    output:
        parquet=PATHS.scan_positions,
        counts=PATHS.scan_calibration_counts,
    log:
        PATHS.job_log(PATHS.scan_dir, "merge_scan_file_{file}"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=lambda wc: spec_json(
            RUN.scans[wc.scan].chunks, RUN.scans[wc.scan].calibration
        ),
        provenance=JOBS.scan_provenance,
    shell:
        "carbon-vep merge-scan --plan {input.plan} --file {wildcards.file:q}"
        " --chunks {input.chunks} --reference {input.reference} --settings {params.settings}"
        " --provenance {params.provenance} --out-parquet {output.parquet:q}"
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
        settings=lambda wc: spec_json(RUN.scans[wc.scan].calibration),
        folder=lambda wc, output: os.path.dirname(output.json),
    shell:
        "carbon-vep calibrate-scan --counts {input.counts:q} --settings {params.settings}"
        " --out {params.folder} > {log} 2>&1"


# The TSV's index is written with it, not declared: a .tbi, or a .csi where a contig of the
# file passes 2^29 bp (a .tbi cannot hold it; the plan's `files[].index` says which).
rule write_scan_tsv:
    input:
        plan=PATHS.scan_plan,
        parquet=PATHS.scan_positions,
        calibration=PATHS.scan_calibration_json,
        reference=lambda wc: RUN.scans[wc.scan].reference,
    output:
        tsv=PATHS.scan_snvs,
    log:
        PATHS.job_log(PATHS.scan_dir, "write_scan_tsv_{file}"),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=lambda wc: spec_json(RUN.scans[wc.scan].calibration),
        provenance=JOBS.scan_provenance,
        calibration=lambda wc, input: os.path.dirname(input.calibration),
    shell:
        "carbon-vep write-scan-tsv --plan {input.plan} --file {wildcards.file:q}"
        " --parquet {input.parquet:q} --calibration {params.calibration}"
        " --reference {input.reference} --settings {params.settings}"
        " --provenance {params.provenance} --out-tsv {output.tsv:q} > {log:q} 2>&1"


rule summarize_scan:
    input:
        plan=PATHS.scan_plan,
        stats=scan_chunk_stats,
        parquet=scan_output_files("parquet"),
        tsv=scan_output_files("tsv"),
        calibration=PATHS.scan_calibration_json,
    output:
        json=PATHS.scan_summary,
        record=PATHS.scan_record,
        md=report(
            PATHS.scan_summary_md,
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
        "carbon-vep summarize-scan --plan {input.plan} --chunk-stats {input.stats}"
        " --parquet {input.parquet:q} --tsv {input.tsv:q} --calibration {params.calibration}"
        " --title '{wildcards.scan} / {wildcards.model}'"
        " --provenance {params.provenance} --out-json {output.json} --out-md {output.md}"
        " --out-record {output.record} > {log} 2>&1"


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
        "carbon-vep export-tracks --scan {params.scan} --out {params.out}"
        " --track {wildcards.track} > {log} 2>&1"


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
        "carbon-vep export-tracks --scan {params.scan} --out {params.out} --hub-only"
        " --reference-mode {params.reference} > {log} 2>&1"


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
        "carbon-vep annotate --scan {params.scan} --checked {input.checked}"
        " --out {output} > {log} 2>&1"
