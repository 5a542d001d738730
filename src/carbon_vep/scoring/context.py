"""Each dataset's windows (or tiles) against the positions of each model that scores it, while
the workflow reads its config: a window too long for a model stops the run there, not in every
one of its score_shard jobs after the model has loaded (which check again, for the models that
cannot be read here: a Hub id, a model an earlier job copies). No torch."""

from __future__ import annotations

from carbon_vep.config.run import RunConfig
from carbon_vep.model.context import check_models_context
from carbon_vep.scan.targets import K


def check_dataset_contexts(run: RunConfig) -> None:
    for key, dataset in run.datasets.items():
        longest = dataset.scoring.model_bases()
        if longest is None:
            continue
        bp, setting = longest
        models = {m: run.models[m].path for m in run.entry_models(dataset)}
        check_models_context(
            bp,
            K,
            models,
            {m for m in models if run.models[m].build_demo},
            what=f"datasets.{key}: {dataset.scoring.recipe} windows",
            setting=setting,
        )
