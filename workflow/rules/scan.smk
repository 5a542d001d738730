# Whole-genome (or any regions') scans: plan -> chunk jobs -> merge per output file -> summary.
print(*SCANS.plan_notes(), sep="\n", file=sys.stderr)  # dry runs show the plans


checkpoint plan_scan:
    input:
        reference=lambda wc: RUN.scans[wc.scan].reference,
        beds=JOBS.scan_bed_files,
    output:
        plan=f"{OUTDIR}/scans/{{scan}}/plan.json",
        report=f"{OUTDIR}/scans/{{scan}}/plan.md",
    log:
        f"{LOG_DIR}/scans/{{scan}}/plan_scan.log",
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=JOBS.plan_settings,
        regions=JOBS.scan_regions,
        models=JOBS.scan_model_paths,
    shell:
        "carbon-vep plan-scan --reference {input.reference} --regions {params.regions}"
        " --settings {params.settings} {params.models} --title {wildcards.scan}"
        " --out {output.plan} --report {output.report} > {log} 2>&1"


rule scan_chunk:
    input:
        plan=f"{OUTDIR}/scans/{{scan}}/plan.json",
        reference=lambda wc: RUN.scans[wc.scan].reference,
        model=JOBS.model_files,
    output:
        chunk=temp(f"{OUTDIR}/scans/{{scan}}/{{model}}/chunks/chunk_{{chunk}}.parquet"),
        stats=f"{OUTDIR}/scans/{{scan}}/{{model}}/chunks/chunk_{{chunk}}.json",
    log:
        f"{LOG_DIR}/scans/{{scan}}/{{model}}/scan_chunk_{{chunk}}.log",
    conda:
        "../../envs/carbon-vep.yaml"
    # a model job like score_shard: a GPU for CUDA models; a cluster profile sets the rest
    resources:
        gpu=JOBS.gpu_count,
        batch_size=JOBS.attempt_batch_size,
        batch_tokens=JOBS.attempt_batch_tokens,
        mem_mb=16000,
        runtime=120,
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
        plan=f"{OUTDIR}/scans/{{scan}}/plan.json",
        chunks=file_chunks,
        reference=lambda wc: RUN.scans[wc.scan].reference,
        neutral=JOBS.scan_neutral_regions,
    output:
        parquet=f"{OUTDIR}/scans/{{scan}}/{{model}}/positions/{{file}}.parquet",
        counts=f"{OUTDIR}/scans/{{scan}}/{{model}}/calibration/counts/{{file}}.parquet",
    log:
        f"{LOG_DIR}/scans/{{scan}}/{{model}}/merge_scan_file_{{file}}.log",
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
        json=f"{SCAN_CALIBRATION}/calibration.json",
        tables=[
            f"{SCAN_CALIBRATION}/{name}"
            for name in (
                "phred.parquet",
                "calibrated_phred.parquet",
                "contexts.parquet",
            )
        ],
    log:
        f"{LOG_DIR}/scans/{{scan}}/{{model}}/calibrate_scan.log",
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        settings=lambda wc: spec_json(RUN.scans[wc.scan].calibration),
        folder=lambda wc, output: os.path.dirname(output.json),
    shell:
        "carbon-vep calibrate-scan --counts {input.counts:q} --settings {params.settings}"
        " --out {params.folder} > {log} 2>&1"


rule write_scan_tsv:
    input:
        plan=f"{OUTDIR}/scans/{{scan}}/plan.json",
        parquet=f"{OUTDIR}/scans/{{scan}}/{{model}}/positions/{{file}}.parquet",
        calibration=f"{SCAN_CALIBRATION}/calibration.json",
        reference=lambda wc: RUN.scans[wc.scan].reference,
    output:
        tsv=f"{OUTDIR}/scans/{{scan}}/{{model}}/snvs/{{file}}.tsv.gz",
        tbi=f"{OUTDIR}/scans/{{scan}}/{{model}}/snvs/{{file}}.tsv.gz.tbi",
    log:
        f"{LOG_DIR}/scans/{{scan}}/{{model}}/write_scan_tsv_{{file}}.log",
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
        plan=f"{OUTDIR}/scans/{{scan}}/plan.json",
        stats=scan_chunk_stats,
        parquet=scan_output_files("parquet"),
        tsv=scan_output_files("tsv"),
        calibration=f"{SCAN_CALIBRATION}/calibration.json",
    output:
        json=f"{OUTDIR}/scans/{{scan}}/{{model}}/summary.json",
        record=f"{OUTDIR}/scans/{{scan}}/{{model}}/scan.json",
        md=report(
            f"{OUTDIR}/scans/{{scan}}/{{model}}/summary.md",
            category="Scans",
            labels={"scan": "{scan}", "model": "{model}"},
        ),
    log:
        f"{LOG_DIR}/scans/{{scan}}/{{model}}/summarize_scan.log",
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
        summary=f"{OUTDIR}/scans/{{scan}}/{{model}}/summary.json",
    output:
        f"{SCAN_TRACKS}/{{track}}.bw",
    log:
        f"{LOG_DIR}/scans/{{scan}}/{{model}}/export_track_{{track}}.log",
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
        summary=f"{OUTDIR}/scans/{{scan}}/{{model}}/summary.json",
        tracks=expand(
            f"{SCAN_TRACKS}/{{track}}.bw", track=TRACK_NAMES, allow_missing=True
        ),
    output:
        hub=f"{SCAN_TRACKS}/hub.txt",
        summary=f"{SCAN_TRACKS}/tracks.json",
    log:
        f"{LOG_DIR}/scans/{{scan}}/{{model}}/write_track_hub.log",
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
        summary=lambda wc: f"{JOBS.lookup_scan_dir(wc)}/summary.json",
        record=lambda wc: f"{JOBS.lookup_scan_dir(wc)}/scan.json",
        calibration=lambda wc: f"{JOBS.lookup_scan_dir(wc)}/calibration/calibration.json",
    output:
        f"{OUTDIR}/{{dataset}}/{{model}}/scores.parquet",
    log:
        f"{LOG_DIR}/{{dataset}}/{{model}}/annotate_from_scan.log",
    wildcard_constraints:
        dataset=TARGETS.dataset_pattern(lookup=True),
    conda:
        "../../envs/carbon-vep.yaml"
    params:
        scan=JOBS.lookup_scan_dir,
    shell:
        "carbon-vep annotate --scan {params.scan} --checked {input.checked}"
        " --out {output} > {log} 2>&1"
