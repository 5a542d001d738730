"""Sequence recovery, GENERator's generative task (docs/suite-conventions.md#recipes).

Published recipe: prompt = DNA prefix + the rightmost ⌊min(len, 6144)/6⌋·6 bases of `sequence`;
greedy-generate 5 tokens (30 bp) with the tokenizer's special tokens suppressed; per row,
accuracy = bases equal to `label` among the first 30 / 30 (a short prediction counts its
missing bases as wrong); headline = mean over rows, plus per-`type` means.

The published evaluation script (huggingface/carbon `evaluation/sequence_recovery_eval.py`,
docs/suite-conventions.md#recipes) adds, and we follow it: `accuracy_mode` fixed_bp (the above)
or prediction_length (matches / min(len label, len prediction), 0 when that is 0); `label_source`
dataset, sequence_tail (the last rollout bp of `sequence` are the label, the rest the prompt,
cut before the prompt is truncated) or auto (the tail for the whole table when the rollout is
longer than its shortest label; ours refuses labels on both sides of it, `table_label_source`);
`species_tags` (the `type`'s tag before the DNA prefix).

The rollouts on our engine, their decoders (the published `token` one and two FNS decoders) and
their KV cache are suite.rollouts'; vLLM's are suite.recovery_vllm. Both hand their texts to
`recover_with`, which scores them here, with no model and no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

import polars as pl

from carbon_vep.columns import FAILED_ALONE, Status
from carbon_vep.config.run import setting_name
from carbon_vep.config.stages import EvaluationSettings, RecoverySettings
from carbon_vep.config.tasks import SEQUENCE_RECOVERY
from carbon_vep.errors import ContextTooLongError, InputError, TokenizerMismatchError
from carbon_vep.evaluate.metrics import add_mean_interval, task_metrics
from carbon_vep.model.context import positions_needed, usable_bp
from carbon_vep.model.tokens import non_acgt_count
from carbon_vep.suite.tasks import Part, require_scorable, task_file

CHANCE_ACCURACY = 0.25
# the published map from the dataset's `type` to the tag put before the DNA prefix
# (huggingface/carbon evaluation/sequence_recovery_eval.py, SPECIES_TAG_MAP); another type
# gets no tag there, and none here
SPECIES_TAGS = {
    "vertebrate_mammalian": "<mammalian_species>",
    "vertebrate_other": "<vertebrate_non_mammalian_species>",
    "fungi": "<fungi_species>",
    "plant": "<plant_species>",
    "protozoa": "<protozoan_species>",
    "invertebrate": "<invertebrate_species>",
}


def prompt_bases(sequence: str, max_bp: int, k: int) -> str:
    """The rightmost ⌊min(len, max_bp)/k⌋·k bases of `sequence` (the prompt without prefix)."""
    keep = (min(len(sequence), max_bp) // k) * k
    return sequence[len(sequence) - keep :]


def base_matches(prediction: str, label: str, score_bp: int) -> int:
    """Positions among the first `score_bp` where prediction and label have the same base."""
    return sum(a == b for a, b in zip(prediction[:score_bp], label[:score_bp], strict=False))


def rollout_bp(settings: RecoverySettings, k: int) -> int:
    """The scored window asked for: `score_bp` under fixed_bp, `new_tokens`·k under
    prediction_length. It is the length of a sequence_tail label and auto's yardstick."""
    return settings.score_bp if settings.accuracy_mode == "fixed_bp" else settings.new_tokens * k


def table_label_source(
    settings: RecoverySettings,
    k: int,
    label_lengths: list[int],
    where: str = "the task file",
    sources: list[str] | None = None,
) -> str:
    """`dataset` or `sequence_tail`, for the whole table, decided from the rows that have a
    label. auto takes the tail when the rollout is longer than the labels (and when no row has
    a label at all), the dataset labels when they all cover it: on a table whose labels are all
    one length, as the published datasets', that is the published rule (the tail when the
    rollout is longer than the shortest label). A table whose labels fall on both sides is
    refused (InputError naming `where`): the published rule would drop every dataset label for
    the few short ones, silently."""
    if settings.label_source != "auto":
        return settings.label_source
    rollout = rollout_bp(settings, k)
    short = [i for i, n in enumerate(label_lengths) if n < rollout]
    if short and len(short) < len(label_lengths):
        named = [sources[i] for i in short[:3]] if sources else []
        raise InputError(
            where,
            f"label_source auto: {len(short)} of {len(label_lengths)} labels are shorter than "
            f"the {rollout} bp rollout ({', '.join(named) or 'e.g. row ' + str(short[0])}: "
            f"{label_lengths[short[0]]} bp) while the others cover it; "
            "the published rule would take the sequence tail for every row and ignore all the "
            "dataset labels. Fix or drop the short labels, or choose: label_source dataset "
            "(short labels scored with their missing bases wrong) or sequence_tail",
        )
    return "sequence_tail" if short or not label_lengths else "dataset"


def check_prompt_positions(
    prompts: Iterable[str], k: int, settings: RecoverySettings, positions: int | None, where: str
) -> None:
    """Refuse, before any rollout, prompts that with the tag, the prefix and the new tokens need
    more positions than the model has (None: not known, nothing checked), naming the setting to
    lower: past them the model would continue at positions it was never trained on."""
    longest = max((len(p) for p in prompts), default=0)
    added = int(settings.species_tags) + settings.new_tokens  # beside the prompt's own
    needed = positions_needed(longest, k) + added
    if positions is None or needed <= positions:
        return
    most = max(0, usable_bp(positions - added, k))
    raise ContextTooLongError(
        f"{where}: prompts of up to {longest:,} bp and {settings.new_tokens} new tokens need "
        f"{needed:,} positions but the model supports {positions:,}; lower "
        f"{setting_name('max_prompt_bp')} to at most {most:,} (or {setting_name('new_tokens')})"
    )


def row_accuracy(prediction: str, label: str, settings: RecoverySettings) -> tuple[int, int, float]:
    """(matches, scored_bp, accuracy) of one row under `settings.accuracy_mode`."""
    if settings.accuracy_mode == "fixed_bp":
        scored = settings.score_bp
    else:
        scored = min(len(label), len(prediction))
    matches = base_matches(prediction, label, scored)
    return matches, scored, matches / scored if scored > 0 else 0.0


def species_tag_ids(tokenizer: Any, types: Iterable[str | None]) -> dict[str, int]:
    """The token id of the species tag of each of `types` that has one (SPECIES_TAGS). A tag the
    tokenizer does not encode as one token of its vocabulary is refused, naming it."""
    vocabulary = tokenizer.get_vocab()
    ids: dict[str, int] = {}
    for tag in sorted({SPECIES_TAGS[t] for t in types if t in SPECIES_TAGS}):
        encoded = list(tokenizer(tag, add_special_tokens=False)["input_ids"])
        if len(encoded) != 1 or vocabulary.get(tag) != encoded[0]:
            raise TokenizerMismatchError(
                f"species tag {tag} is not one token of the model's vocabulary (the tokenizer "
                f"encodes it as {len(encoded)} ids): species_tags needs a model trained with "
                "the species tags; set species_tags off for this model"
            )
        ids[tag] = int(encoded[0])
    return ids


# ---- the task ----------------------------------------------------------------------------
_ROW_SCHEMA = {
    "row_id": pl.Int64,
    **dict.fromkeys(
        ("source", "sequence", "label", "type", "status", "reason", "label_source"), pl.Utf8
    ),
    **dict.fromkeys(("prompt_bp", "prompt_non_acgt", "n_match", "scored_bp"), pl.Int64),
    "accuracy": pl.Float64,
    "prediction": pl.Utf8,
}


def _row_plan(
    table: pl.DataFrame, k: int, settings: RecoverySettings
) -> tuple[list[dict], str, dict[int, tuple[str, str]], dict[int, str], dict[int, str]]:
    """What each row of the whole table becomes, before any model runs: the rows (bases
    upper-cased), the table's label source, the held-out (sequence the prompt is cut from,
    label) and prompt of each row to generate, and the reason of each row that is `invalid`.
    Stops (InputError) where the published script stops: a sequence not longer than a
    sequence_tail label; and on labels auto cannot decide on (`table_label_source`)."""
    where = task_file(table)
    rows = table.select(
        "row_id",
        "source",
        pl.col("sequence").cast(pl.Utf8).str.to_uppercase(),
        pl.col("label").cast(pl.Utf8).str.to_uppercase(),
        pl.col("type").cast(pl.Utf8),
    ).to_dicts()
    labelled = [r for r in rows if r["label"]]  # an empty label is no label
    lengths, sources = [len(r["label"]) for r in labelled], [r["source"] for r in labelled]
    source = table_label_source(settings, k, lengths, where, sources)
    tail = rollout_bp(settings, k) if source == "sequence_tail" else 0
    short = [r for r in rows if r["sequence"] and len(r["sequence"]) <= tail]
    if short:
        raise InputError(
            short[0]["source"],
            f"sequence of {len(short[0]['sequence'])} bp is not longer than the {tail} bp "
            f"sequence_tail label (label_source {settings.label_source}; {len(short)} such "
            "row(s)): drop them, or use label_source dataset",
        )
    held_out: dict[int, tuple[str, str]] = {}  # row -> (what the prompt is cut from, label)
    prompts: dict[int, str] = {}
    invalid: dict[int, str] = {}
    for r in rows:
        i = r["row_id"]
        if r["sequence"] and tail:  # the tail is cut first, then the prompt truncated
            held_out[i] = (r["sequence"][:-tail], r["sequence"][-tail:])
        elif r["sequence"] and r["label"]:
            held_out[i] = (r["sequence"], r["label"])
        else:
            invalid[i] = "missing sequence" if tail else "missing sequence or label"
            continue
        prompt = prompt_bases(held_out[i][0], settings.max_prompt_bp, k)
        if not prompt:
            invalid[i] = (
                f"prompt shorter than one {k}-mer ({len(held_out[i][0])} bp to prompt with): "
                "the model would continue its prefix alone"
            )
        elif non_acgt_count(prompt[-k:]):
            invalid[i] = (
                f"non-ACGT base in the prompt's last {k}-mer ({prompt[-k:]}): the model would "
                "continue an <oov> token"
            )
        else:
            prompts[i] = prompt
    return rows, source, held_out, prompts, invalid


def row_reasons(table: pl.DataFrame, k: int, settings: RecoverySettings) -> list[str]:
    """Each row's reason not to be scored ("" for a row to generate), no model needed."""
    _, _, _, _, invalid = _row_plan(_with_type(table, settings), k, settings)
    return [invalid.get(i, "") for i in table["row_id"].to_list()]


def _with_type(table: pl.DataFrame, settings: RecoverySettings) -> pl.DataFrame:
    if "type" in table.columns:
        return table
    if settings.species_tags and table.height:
        raise InputError(task_file(table), "species_tags needs a `type` column; found none")
    return table.with_columns(pl.lit(None, pl.Utf8).alias("type"))


def recover_with(
    table: pl.DataFrame,
    k: int,
    settings: RecoverySettings,
    generate: Callable[[list[str], list[tuple[int, ...]]], list[str | None]],
    tokenizer: Any = None,
    part: Part | None = None,
    positions: int | None = None,
) -> pl.DataFrame:
    """`recover` with the continuations from `generate` (prompts and each prompt's leading ids
    -> texts, None where a prompt failed): our engine's, or vLLM's (suite.recovery_vllm).
    `tokenizer` resolves the species tags (needed with `species_tags`). With a `part`, only
    its share of the rows is generated and returned. `positions`: the model's, which the
    whole table's prompts must fit (`check_prompt_positions`; every part checks the same).

    The label source is decided for the whole table (`table_label_source`), a part's too; with
    sequence_tail, a sequence not longer than the tail stops the run naming its row, as the
    published script stops (it has no per-row status for it). A row without a sequence or
    label, whose prompt is shorter than one k-mer or whose prompt's last k-mer holds a base
    other than ACGT is `invalid`, with its reason, and not generated; a table with no row left
    to generate stops (InputError naming the file and the commonest reasons)."""
    table = _with_type(table, settings)
    rows, source, held_out, prompt_of, invalid = _row_plan(table, k, settings)
    require_scorable(task_file(table), [invalid.get(r["row_id"], "") for r in rows])
    check_prompt_positions(prompt_of.values(), k, settings, positions, task_file(table))
    if part is not None:
        rows = rows[part.rows(len(rows))]
        mine = {r["row_id"] for r in rows}
        prompt_of = {i: p for i, p in prompt_of.items() if i in mine}
    if settings.species_tags and tokenizer is None:
        raise ValueError("recover_with: species_tags needs the model's tokenizer")
    tag_id = species_tag_ids(tokenizer, [r["type"] for r in rows]) if settings.species_tags else {}
    tags = {r["row_id"]: SPECIES_TAGS.get(r["type"] or "") for r in rows}
    leads = [(tag_id[tags[i]],) if tags[i] in tag_id else () for i in prompt_of]
    generated = generate(list(prompt_of.values()), leads)
    predictions = dict(zip(prompt_of, generated, strict=True))
    out = []
    for r in rows:
        i = r["row_id"]
        record = {**r, "status": Status.INVALID.value, "reason": invalid.get(i, "")}
        record.update(label_source=source)
        record.update(dict.fromkeys(("prompt_bp", "prompt_non_acgt", "n_match", "scored_bp")))
        record.update(accuracy=None, prediction=None)
        if i in held_out:
            record["label"] = held_out[i][1]
        if i in predictions and predictions[i] is None:
            record.update(status=Status.FAILED.value, reason=FAILED_ALONE)
        elif i in predictions:
            pred, prompt = predictions[i], prompt_of[i]
            matches, scored_bp, accuracy = row_accuracy(pred, record["label"], settings)
            record.update(
                status=Status.SCORED.value,
                reason="",
                prompt_bp=len(prompt),
                prompt_non_acgt=non_acgt_count(prompt),
                prediction=pred,
                n_match=matches,
                scored_bp=scored_bp,
                accuracy=accuracy,
            )
        out.append(record)
    shown = settings.score_bp if settings.accuracy_mode == "fixed_bp" else None  # label shown
    return (
        pl.DataFrame(out, schema=_ROW_SCHEMA)  # typed: a part's rows may all lack a value
        .drop("sequence")
        .with_columns(
            pl.col("label").str.slice(0, shown),
            pl.col("accuracy").cast(pl.Float64),
            pl.lit(settings.decoder).alias("decoder"),
        )
    )


def recovery_metrics(
    predictions: pl.DataFrame,
    settings: RecoverySettings,
    evaluation: EvaluationSettings | None = None,
) -> dict:
    """Headline accuracy, per-type means, interval, counts, parameters and definitions."""
    evaluation = evaluation or EvaluationSettings()
    scored = predictions.filter(pl.col("status") == Status.SCORED)
    accuracy = scored["accuracy"].to_numpy()
    has_bp = "scored_bp" in scored.columns
    by_type: dict[str, dict] = {}
    for (t,), part in scored.filter(pl.col("type").is_not_null()).group_by("type"):
        by_type[str(t)] = {"n": part.height, "accuracy": float(part["accuracy"].mean())}
        if has_bp:
            by_type[str(t)]["mean_scored_bp"] = float(part["scored_bp"].mean())
    sources = predictions["label_source"].drop_nulls() if "label_source" in predictions else None
    result = task_metrics(
        SEQUENCE_RECOVERY.name,
        predictions,
        scored,
        metrics={"accuracy": float(accuracy.mean()) if len(accuracy) else None},
        by_type=dict(sorted(by_type.items())),
        label_source=sources[0] if sources is not None and len(sources) else None,
        mean_scored_bp=float(scored["scored_bp"].mean()) if has_bp and scored.height else None,
        chance_accuracy=CHANCE_ACCURACY,
        definitions=SEQUENCE_RECOVERY.definitions(settings),
        parameters=asdict(settings),
    )
    add_mean_interval(result, "accuracy", accuracy, evaluation)
    if settings.label_source == "auto" and result["label_source"] == "sequence_tail":
        result["warnings"].append(
            "label_source auto took the sequence tail: the rollout is longer than the labels, "
            "so every row's label is the end of its sequence (published rule)"
        )
    if settings.species_tags:
        tagged = pl.col("type").is_in(list(SPECIES_TAGS)).fill_null(False)
        untagged = scored.filter(~tagged).height
        if untagged:
            result["warnings"].append(
                f"{untagged} rows have a type without a species tag: prompted without one, as "
                "published"
            )
    short = scored.filter(pl.col("label").str.len_chars() < settings.score_bp).height
    if short and settings.accuracy_mode == "fixed_bp":
        result["warnings"].append(
            f"{short} labels are shorter than {settings.score_bp} bp: their missing bases count "
            "as wrong (published denominator)"
        )
    with_n = scored.filter(pl.col("prompt_non_acgt") > 0).height
    if with_n:
        result["warnings"].append(f"{with_n} prompts contain non-ACGT bases (sent as <oov>)")
    return result


# ---- a task cut into parts (a task entry's `parts`) ---------------------------------------
def merged_speculative(records: list[dict]) -> dict:
    """A draft's record over the parts: their counts summed, the rates taken again from the
    sums (the accepted tokens of each part: its rate x its proposals)."""
    out = dict(records[0])  # the names and the proposals a step, as every part has them
    proposed_key = "draft_calls" if "draft_calls" in out else "draft_tokens"
    counts = [k for k, v in out.items() if type(v) is int and k != "speculative_tokens"]
    out.update({k: sum(r[k] for r in records) for k in counts})
    accepted = sum(round((r["acceptance_rate"] or 0) * r[proposed_key]) for r in records)
    out["acceptance_rate"] = accepted / out[proposed_key] if out[proposed_key] else None
    if "tokens_per_target_call" in out:
        calls = out["target_calls"]
        out["tokens_per_target_call"] = out["new_tokens"] / calls if calls else None
    return out
