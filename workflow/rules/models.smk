# One build rule per configured demo model (`build_demo: true`): built locally, no download.
for demo_name, demo_path in DEMO_MODEL_PATHS.items():

    rule:
        name:
            f"build_demo_model_{demo_name}"
        output:
            directory(demo_path),
        log:
            f"logs/build_demo_model_{demo_name}.log",
        conda:
            "../../envs/carbon-vep.yaml"
        shell:
            "carbon-vep build-demo-model --out {output} > {log} 2>&1"
