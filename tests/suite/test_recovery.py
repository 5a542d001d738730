"""Sequence recovery: the published prompt, accuracy, decoders, and generation through the model."""

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from transformers import LogitsProcessorList

from carbon_vep.cli import main
from carbon_vep.config.stages import EvaluationSettings, ModelSettings, RecoverySettings
from carbon_vep.errors import InputError, TokenizerMismatchError
from carbon_vep.model.loading import load_model
from carbon_vep.model.tokens import BASES, suppressed_token_ids
from carbon_vep.suite.recovery import (
    base_matches,
    prompt_bases,
    recover_with,
    recovery_metrics,
    rollout_bp,
    row_accuracy,
    table_label_source,
)
from carbon_vep.suite.rollouts import (
    fns_conditional_choice,
    fns_marginal_choice,
    generate_continuations,
    recover,
)


def test_prompt_is_the_rightmost_whole_kmers_up_to_the_limit():
    seq = "".join(BASES[i % 4] for i in range(20))
    assert prompt_bases(seq, 6144, 6) == seq[2:]  # 20 bp -> the last 18
    assert prompt_bases(seq, 13, 6) == seq[8:]  # limit 13 -> the last 12
    assert prompt_bases("ACGTA", 6144, 6) == ""  # shorter than one token: prefix only


def test_accuracy_denominator_is_fixed_and_short_predictions_lose_bases():
    label = "ACGT" * 8
    assert base_matches(label, label, 30) == 30
    assert base_matches(label[:12], label, 30) == 12  # 18 missing bases count as wrong
    assert base_matches("T" + label[1:], label, 30) == 29
    assert base_matches(label + "GG", label, 30) == 30  # bases past 30 are not scored


def _grid_distribution(probabilities: dict[str, float], k: int) -> torch.Tensor:
    kmers = ["".join(p) for p in itertools.product(BASES, repeat=k)]
    rest = (1 - sum(probabilities.values())) / (len(kmers) - len(probabilities))
    p = torch.tensor([probabilities.get(x, rest) for x in kmers])
    return p.log()[None, :]


def test_fns_decoders_differ_from_the_token_argmax_as_defined():
    """k=2: AA is the most likely 2-mer, T the likeliest first base, A the likeliest second."""
    probs = {"AA": 0.30, "TT": 0.26, "TC": 0.24}
    log_p = _grid_distribution(probs, 2)
    kmers = ["".join(p) for p in itertools.product(BASES, repeat=2)]
    assert kmers[int(log_p.argmax())] == "AA"  # token-level greedy
    assert kmers[int(fns_marginal_choice(log_p, 2))] == "TA"  # m_0: T .50, m_1: A .30+
    assert kmers[int(fns_conditional_choice(log_p, 2))] == "TT"  # T, then T | T


def test_fns_marginal_choice_matches_brute_force_for_6mers():
    rng = np.random.default_rng(0)
    log_p = torch.log_softmax(torch.as_tensor(rng.normal(0, 2, (5, 4096))), dim=-1)
    grid = log_p.exp().reshape(5, *([4] * 6)).numpy()
    for row, index in enumerate(fns_marginal_choice(log_p, 6).tolist()):
        bases = [
            int(np.argmax(grid[row].sum(axis=tuple(a for a in range(6) if a != j))))
            for j in range(6)
        ]
        assert index == sum(b * 4 ** (5 - j) for j, b in enumerate(bases))


def test_fns_conditional_choice_matches_brute_force_for_6mers():
    rng = np.random.default_rng(1)
    log_p = torch.log_softmax(torch.as_tensor(rng.normal(0, 2, (5, 4096))), dim=-1)
    grid = log_p.exp().reshape(5, *([4] * 6)).numpy()
    for row, index in enumerate(fns_conditional_choice(log_p, 6).tolist()):
        current, bases = grid[row], []
        for _ in range(6):
            joint = current.reshape(4, -1).sum(axis=1)
            bases.append(int(np.argmax(joint)))
            current = current[bases[-1]]
        assert index == sum(b * 4 ** (5 - j) for j, b in enumerate(bases))


@pytest.fixture(scope="module")
def loaded(demo_model_dir):
    return load_model(ModelSettings(str(demo_model_dir), trust_remote_code=True))


def test_special_tokens_and_dna_tags_are_suppressed(loaded):
    tok = loaded.tokenizer
    ids = set(suppressed_token_ids(tok))
    tags = {tok.convert_tokens_to_ids(t) for t in ("<dna>", "</dna>", "<oov>")}
    assert tags | {tok.eos_token_id} <= ids
    assert not ids & set(loaded.vocab.kmer_ids.tolist())


@pytest.mark.parametrize("decoder", ["token", "fns_marginal", "fns_conditional"])
def test_generation_is_the_same_alone_and_in_a_batch(loaded, decoder):
    rng = np.random.default_rng(2)
    prompts = ["".join(rng.choice(list(BASES), n)) for n in (36, 36, 60, 36, 12)]
    settings = RecoverySettings(decoder=decoder)
    together = generate_continuations(loaded, prompts, settings, batch_size=3)
    alone = [generate_continuations(loaded, [p], settings, 1)[0] for p in prompts]
    assert together == alone
    if decoder != "token":  # FNS decoders emit k-mers only: 5 tokens = 30 bases
        assert all(len(c) == 30 and set(c) <= set(BASES) for c in together)


def test_recover_keeps_every_row_and_scores_against_the_label(loaded):
    rng = np.random.default_rng(3)
    seqs = ["".join(rng.choice(list(BASES), 66)) for _ in range(3)]
    table = pl.DataFrame(
        {
            "sequence": [*seqs, None],
            "label": ["A" * 40, "c" * 30, "G" * 30, "A" * 30],
            "type": ["x", "x", "y", "y"],
        }
    ).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"), pl.lit("f").alias("source")
    )
    settings = RecoverySettings(decoder="fns_marginal")
    out = recover(table, loaded, settings, 8)
    assert out["row_id"].to_list() == [0, 1, 2, 3]
    assert out["status"].to_list() == ["scored", "scored", "scored", "invalid"]
    assert out["label"][0] == "A" * 30 and out["label"][1] == "C" * 30  # cut, upper-cased
    assert out["prompt_bp"][0] == 66 and out["prompt_non_acgt"][0] == 0
    for row in out.filter(pl.col("status") == "scored").to_dicts():
        assert row["n_match"] == base_matches(row["prediction"], row["label"], 30)
        assert row["accuracy"] == pytest.approx(row["n_match"] / 30)


def test_prompts_past_the_models_positions_are_refused_before_any_rollout(loaded, monkeypatch):
    """72 bp prompts (12 tokens) + `<dna>` + 5 new tokens need 18 positions: a model with 17 is
    refused naming the setting to lower (it used to generate past its positions, warned about
    by transformers alone); with 18 they run."""
    from carbon_vep.errors import ContextTooLongError

    table = _part_table(["A" * 30, "C" * 30])
    calls = []

    def no_rollout(*args, **kwargs):
        calls.append(args)
        return []

    monkeypatch.setattr("carbon_vep.suite.rollouts.generate_continuations", no_rollout)
    monkeypatch.setattr(loaded.model.config, "max_position_embeddings", 17)
    with pytest.raises(
        ContextTooLongError,
        match=r"t\.tsv: prompts of up to 72 bp .* need 18 "
        r"positions but the model supports 17; lower .*max-prompt-bp.* at most 66",
    ):
        recover(table, loaded, RecoverySettings(), 8)
    assert not calls
    monkeypatch.undo()
    monkeypatch.setattr(loaded.model.config, "max_position_embeddings", 18)
    assert recover(table, loaded, RecoverySettings(), 8)["status"].to_list() == ["scored"] * 2


def test_recovery_metrics_are_row_means_with_per_type_means():
    predictions = pl.DataFrame(
        {
            "status": ["scored", "scored", "scored", "invalid"],
            "accuracy": [0.5, 1.0, 0.0, None],
            "type": ["a", "a", "b", "b"],
            "label": ["A" * 30] * 3 + [None],
            "prompt_non_acgt": [0, 0, 1, None],
        }
    )
    result = recovery_metrics(predictions, RecoverySettings(), EvaluationSettings(bootstrap=100))
    assert result["metrics"]["accuracy"] == pytest.approx(0.5)
    assert result["by_type"] == {"a": {"n": 2, "accuracy": 0.75}, "b": {"n": 1, "accuracy": 0.0}}
    assert result["status_counts"] == {"invalid": 1, "scored": 3}
    assert "/ 30" in result["definitions"]["accuracy"]
    assert any("non-ACGT" in w for w in result["warnings"])
    assert 0.0 <= result["confidence_intervals"]["accuracy"]["low"] <= 0.5


# ---- the published script's modes (huggingface/carbon evaluation/sequence_recovery_eval.py) ----
# The reference below re-states that script's per-row logic in plain code, independently of
# suite.recovery: label source, prompt text, tokenization, generation, accuracy per mode.
SCRIPT_SPECIES_TAGS = {
    "vertebrate_mammalian": "<mammalian_species>",
    "vertebrate_other": "<vertebrate_non_mammalian_species>",
    "fungi": "<fungi_species>",
    "plant": "<plant_species>",
    "protozoa": "<protozoan_species>",
    "invertebrate": "<invertebrate_species>",
}


class _Suppress:
    """The script's logits processor: the special ids to -inf."""

    def __init__(self, ids):
        self.ids = ids

    def __call__(self, input_ids, scores):
        scores[:, self.ids] = -float("inf")
        return scores


def _script_reference(
    rows,
    tokenizer,
    model,
    *,
    gen_len,
    accuracy_mode,
    score_len_bp,
    label_source,
    max_seq_len,
    use_species_tags,
):
    """(pred, label, accuracy, scored_bp, label_source) per row, as the script computes them."""
    requested = score_len_bp if accuracy_mode == "fixed_bp" else gen_len * 6
    if label_source == "auto":
        use_tail = requested > min(len(r["label"]) for r in rows)
    else:
        use_tail = label_source == "sequence_tail"
    # Carbon's tokenizer lists its DNA tags in `special_tokens`, which the script suppresses;
    # the demo tokenizer keeps them in `dna_special_tokens`
    special = sorted(
        set(tokenizer.all_special_ids)
        | set(tokenizer.convert_tokens_to_ids(tokenizer.dna_special_tokens))
    )
    out = []
    for r in rows:
        seq = r["sequence"]
        prompt_seq, label = (seq[:-requested], seq[-requested:]) if use_tail else (seq, r["label"])
        keep = min(len(prompt_seq), max_seq_len) // 6 * 6
        truncated = prompt_seq[-keep:] if keep > 0 else ""
        tag = SCRIPT_SPECIES_TAGS.get(r["type"], "") if use_species_tags else ""
        inputs = tokenizer(tag + "<dna>" + truncated, add_special_tokens=False, return_tensors="pt")
        with torch.inference_mode():
            generated = model.generate(
                **inputs,
                max_new_tokens=gen_len,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                logits_processor=LogitsProcessorList([_Suppress(special)]),
            )
        pred = tokenizer.decode(generated[0, -gen_len:].tolist())
        scored = score_len_bp if accuracy_mode == "fixed_bp" else min(len(label), len(pred))
        same = sum(1 for i in range(min(len(label), len(pred), scored)) if label[i] == pred[i])
        accuracy = same / scored if scored > 0 else 0.0
        source = "sequence_tail" if use_tail else "dataset"
        out.append((pred, label, accuracy, scored, source, inputs["input_ids"][0].tolist()))
    return out


def _task_table(rows):
    return pl.DataFrame(rows).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"),
        pl.format("t.tsv:line {}", pl.int_range(pl.len()) + 2).alias("source"),
    )


def _rows(seed, lengths, label_bp, types=None):
    rng = np.random.default_rng(seed)
    types = types or [f"type{i % 2}" for i in range(len(lengths))]
    return [
        {
            "sequence": "".join(rng.choice(list(BASES), n)),
            "label": "".join(rng.choice(list(BASES), m)),
            "type": t,
        }
        for n, m, t in zip(lengths, label_bp, types, strict=True)
    ]


def _compare_with_script(loaded, rows, settings, monkeypatch, use_species_tags=False):
    expected = _script_reference(
        rows,
        loaded.tokenizer,
        loaded.model,
        gen_len=settings.new_tokens,
        accuracy_mode=settings.accuracy_mode,
        score_len_bp=settings.score_bp,
        label_source=settings.label_source,
        max_seq_len=settings.max_prompt_bp,
        use_species_tags=use_species_tags,
    )
    prompts, generate = [], loaded.model.generate

    def recording(input_ids=None, **kwargs):
        prompts.extend(input_ids.tolist())
        return generate(input_ids=input_ids, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(loaded.model, "generate", recording)
        got = recover(_task_table(rows), loaded, settings, batch_size=4)
    assert sorted(prompts) == sorted(e[5] for e in expected)  # the same token ids go in
    assert got["status"].to_list() == ["scored"] * len(rows)
    assert got["prediction"].to_list() == [e[0] for e in expected]
    assert got["accuracy"].to_list() == [e[2] for e in expected]  # float32 model, exact
    assert got["scored_bp"].to_list() == [e[3] for e in expected]
    assert got["label_source"].to_list() == [e[4] for e in expected]
    shown = settings.score_bp if settings.accuracy_mode == "fixed_bp" else None
    assert got["label"].to_list() == [e[1][:shown] for e in expected]
    return got, expected


# lengths not multiples of 6, some past max_prompt_bp (100 bp): the tail is cut before the
# prompt is truncated, as in the script
CASES = {
    # fixed_bp, dataset labels: a 12 bp label (shorter than the 30 bp rollout) loses 18 bases
    "fixed_dataset_short_label": (
        dict(label_source="dataset"),
        [157, 95, 64, 131],
        [12, 30, 40, 128],
    ),
    # prediction_length, dataset labels: a 20 bp label caps the scored bases at 20
    "prediction_length_dataset": (
        dict(accuracy_mode="prediction_length", label_source="dataset", new_tokens=8),
        [157, 95, 64, 131],
        [20, 60, 48, 128],
    ),
    # prediction_length, the last 48 bp of the sequence are the label
    "prediction_length_sequence_tail": (
        dict(accuracy_mode="prediction_length", label_source="sequence_tail", new_tokens=8),
        [157, 95, 64, 131],
        [20, 60, 48, 128],
    ),
    # auto keeps the dataset labels: 30 bp is not longer than the shortest label (30)
    "auto_dataset": (dict(), [157, 95, 64, 131], [30, 31, 40, 128]),
    # auto takes the tail: 48 bp is longer than the labels (40; a table whose labels fall on
    # both sides of the rollout is refused: test_auto_refuses_labels_on_both_sides_of_the_rollout)
    "auto_sequence_tail": (
        dict(accuracy_mode="prediction_length", new_tokens=8),
        [157, 95, 64, 131],
        [40, 40, 40, 40],
    ),
    # fixed_bp with a tail: the tail is score_bp long (the script's requested rollout)
    "fixed_sequence_tail": (
        dict(label_source="sequence_tail"),
        [157, 95, 64, 131],
        [30, 30, 30, 30],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_predictions_and_accuracies_equal_the_published_scripts(loaded, case, monkeypatch):
    overrides, lengths, label_bp = CASES[case]
    settings = RecoverySettings(max_prompt_bp=100, **overrides)
    rows = _rows(7, lengths, label_bp)
    got, expected = _compare_with_script(loaded, rows, settings, monkeypatch)
    if case == "fixed_dataset_short_label":
        assert got["scored_bp"][0] == 30 and got["n_match"][0] <= 12
    if case == "prediction_length_dataset":
        assert got["scored_bp"].to_list()[0] == min(20, len(expected[0][0]))
    if case.endswith("sequence_tail"):
        assert set(got["label_source"]) == {"sequence_tail"}
        assert got["prompt_bp"][0] == 96  # 157 - tail (48 or 30) -> 109 or 127 -> 100 -> 96


@pytest.fixture(scope="module")
def tagged(demo_model_dir):
    """The demo model with the six species tags added to its tokenizer as special tokens (the
    embedding grown to match), as a model trained with them would have."""
    from carbon_vep.model.loading import LoadedModel
    from carbon_vep.model.tokens import dna_vocab

    base = load_model(ModelSettings(str(demo_model_dir), trust_remote_code=True))
    base.tokenizer.add_tokens(sorted(SCRIPT_SPECIES_TAGS.values()), special_tokens=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        base.model.resize_token_embeddings(len(base.tokenizer))
    vocab = dna_vocab(base.tokenizer)
    return LoadedModel(base.model, base.tokenizer, vocab, base.device, base.settings)


@pytest.mark.parametrize("accuracy_mode", ["fixed_bp", "prediction_length"])
def test_species_tags_go_before_the_prefix_as_in_the_script(tagged, accuracy_mode, monkeypatch):
    types = ["vertebrate_mammalian", "fungi", "not_a_species", "plant", "vertebrate_mammalian"]
    rows = _rows(8, [66, 66, 66, 90, 157], [30, 40, 48, 60, 128], types)
    # the 48 bp rollout of prediction_length lies within these labels: auto refuses such a
    # table, so the tail the published auto takes is asked for by name
    source = "sequence_tail" if accuracy_mode == "prediction_length" else "auto"
    settings = RecoverySettings(
        accuracy_mode=accuracy_mode, species_tags=True, new_tokens=8, label_source=source
    )
    got, expected = _compare_with_script(tagged, rows, settings, monkeypatch, True)
    vocab, dna = tagged.tokenizer.get_vocab(), tagged.vocab.prefix_id
    for row, (*_, ids) in zip(rows, expected, strict=True):  # tag, <dna>, 6-mers; or no tag
        tag = SCRIPT_SPECIES_TAGS.get(row["type"])
        assert ids[:2] == ([vocab[tag], dna] if tag else [dna, ids[1]])
    result = recovery_metrics(got, settings, EvaluationSettings(bootstrap=0))
    assert list(result["by_type"]) == sorted(set(types))  # the script's per-type order
    assert any("without a species tag" in w for w in result["warnings"])


def test_a_species_tag_the_vocabulary_lacks_is_refused_naming_it(loaded):
    assert "<mammalian_species>" not in loaded.tokenizer.get_vocab()  # the demo has none
    rows = _rows(9, [66, 66], [30, 30], ["vertebrate_mammalian", "x"])
    with pytest.raises(TokenizerMismatchError, match="<mammalian_species>"):
        recover(_task_table(rows), loaded, RecoverySettings(species_tags=True), 4)
    untyped = _task_table(rows).drop("type")
    with pytest.raises(InputError, match="t.tsv: species_tags needs a `type` column"):
        recover(untyped, loaded, RecoverySettings(species_tags=True), 4)


def test_a_sequence_not_longer_than_the_tail_stops_the_run_naming_its_row(loaded):
    rows = _rows(10, [66, 48, 30], [30, 30, 30])
    settings = RecoverySettings(
        label_source="sequence_tail", accuracy_mode="prediction_length", new_tokens=8
    )
    message = r"t.tsv:line 3: sequence of 48 bp is not longer than the 48 bp sequence_tail label"
    with pytest.raises(InputError, match=message):
        recover(_task_table(rows), loaded, settings, 4)


def test_accuracy_per_mode_and_the_auto_rule():
    fixed, by_prediction = RecoverySettings(), RecoverySettings(accuracy_mode="prediction_length")
    assert row_accuracy("ACGTAC", "ACGTAA" * 10, fixed) == (5, 30, 5 / 30)
    assert row_accuracy("ACGTAC", "ACGTAA" * 10, by_prediction) == (5, 6, 5 / 6)
    assert row_accuracy("ACGTAC" * 5, "ACG", by_prediction) == (3, 3, 1.0)
    assert row_accuracy("", "ACG", by_prediction) == (0, 0, 0.0)  # nothing to score: 0
    assert rollout_bp(fixed, 6) == 30 and rollout_bp(by_prediction, 6) == 30  # 5 tokens
    assert table_label_source(fixed, 6, [30, 128]) == "dataset"  # 30 is not longer than 30
    assert table_label_source(fixed, 6, [29, 20]) == "sequence_tail"
    assert table_label_source(fixed, 6, []) == "sequence_tail"  # no label at all
    with pytest.raises(InputError, match="1 of 2 labels are shorter than the 30 bp rollout"):
        table_label_source(fixed, 6, [29, 128])  # one short label among long ones
    assert table_label_source(RecoverySettings(label_source="dataset"), 6, [1]) == "dataset"
    assert table_label_source(RecoverySettings(label_source="sequence_tail"), 6, [999]) == (
        "sequence_tail"
    )


def test_score_recovery_has_the_flags():
    from carbon_vep.cli import build_parser

    args = build_parser().parse_args(
        [
            "score-recovery",
            "--tasks-file",
            "t",
            "--model",
            "m",
            "--out",
            "o",
            "--metrics",
            "j",
            "--task",
            "t",
            "--model-key",
            "m",
            "--accuracy-mode",
            "prediction_length",
            "--label-source",
            "sequence_tail",
            "--species-tags",
            "--new-tokens",
            "8",
            "--max-prompt-bp",
            "96",
            "--score-bp",
            "12",
        ]
    )
    from carbon_vep.config.fields import from_args

    (settings,) = from_args(args, RecoverySettings)
    expected = {"accuracy_mode": "prediction_length", "label_source": "sequence_tail"}
    assert settings == RecoverySettings(
        max_prompt_bp=96, new_tokens=8, score_bp=12, species_tags=True, **expected
    )


def test_metrics_report_scored_bp_the_label_source_and_skip_untyped_rows():
    predictions = pl.DataFrame(
        {
            "status": ["scored"] * 4,
            "accuracy": [0.5, 1.0, 0.25, 0.0],
            "scored_bp": [48, 20, 48, 0],
            "type": ["vertebrate_mammalian", "fungi", "fungi", None],
            "label": ["A" * 48] * 4,
            "label_source": ["sequence_tail"] * 4,
            "prompt_non_acgt": [0] * 4,
        }
    )
    settings = RecoverySettings(accuracy_mode="prediction_length", new_tokens=8)
    result = recovery_metrics(predictions, settings, EvaluationSettings(bootstrap=0))
    assert result["metrics"]["accuracy"] == pytest.approx(0.4375)  # overall: every row
    assert list(result["by_type"]) == ["fungi", "vertebrate_mammalian"]  # sorted, no None
    assert result["by_type"]["fungi"] == {"n": 2, "accuracy": 0.625, "mean_scored_bp": 34.0}
    assert result["mean_scored_bp"] == 29.0 and result["label_source"] == "sequence_tail"
    assert "min(label length, prediction length)" in result["definitions"]["accuracy"]
    assert any("auto took the sequence tail" in w for w in result["warnings"])


def test_the_recipe_loads_no_model_library():
    """suite.recovery (prompts, labels, accuracy, metrics) imports neither torch nor
    transformers: the rollouts that need them are suite.rollouts."""
    code = (
        "import sys, carbon_vep.suite.recovery; "
        "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- a task cut into parts (a task entry's `parts`) -----------------------------------------
def _part_table(labels: list[str]) -> pl.DataFrame:
    rng = np.random.default_rng(7)
    seqs = ["".join(rng.choice(list(BASES), 72)) for _ in labels]
    return pl.DataFrame({"sequence": seqs, "label": labels}).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"),
        pl.format("t.tsv:line {}", pl.int_range(pl.len()) + 2).alias("source"),
    )


def _echo(prompts: list[str], leads) -> list[str]:
    """A stand-in for the model: each prompt's last 30 bases, so accuracies vary by row."""
    return [p[-30:] for p in prompts]


def test_parts_cover_every_row_once_and_decide_the_label_source_on_the_whole_table():
    """A part generates and returns only its I/N share of the rows; the shares, merged, are the
    one job's table exactly. auto's label source is the whole table's even in a part whose
    own labels would decide otherwise (rows 0-1 have no label and rows 2-6 12 bp labels, shorter
    than the 30 bp rollout: every row's label is its sequence's tail, in every part)."""
    from carbon_vep.suite.recovery import recover_with
    from carbon_vep.suite.tasks import Part, merged_parts

    table = _part_table([None] * 2 + ["ACGTAC" * 2] * 5)
    settings = RecoverySettings()
    whole = recover_with(table, 6, settings, _echo)
    assert set(whole["label_source"]) == {"sequence_tail"}
    shares = [recover_with(table, 6, settings, _echo, part=Part(i, 3)) for i in range(3)]
    assert [s.height for s in shares] == [2, 2, 3]  # 7 * i // 3: rows 0-1, 2-3, 4-6
    assert [s["row_id"].to_list() for s in shares] == [[0, 1], [2, 3], [4, 5, 6]]
    assert all(set(s["label_source"]) == {"sequence_tail"} for s in shares)
    assert merged_parts("t.tsv", 7, shares[::-1]).equals(whole)  # any order in, file order out
    alone = recover_with(table[:2], 6, settings, _echo)  # the first rows as a table of their own
    assert set(alone["label_source"]) == {"sequence_tail"}
    labelled = _part_table([None] * 2 + ["ACGTAC" * 10] * 5)  # the labels cover the rollout
    assert set(recover_with(labelled, 6, settings, _echo)["label_source"]) == {"dataset"}
    alone = recover_with(labelled[:2], 6, settings, _echo)  # no label: what a part alone takes
    assert set(alone["label_source"]) == {"sequence_tail"}
    # more parts than rows: the empty shares keep the columns and their types
    many = [recover_with(table[:2], 6, settings, _echo, part=Part(i, 4)) for i in range(4)]
    assert [m.height for m in many] == [0, 1, 0, 1]
    assert all(m.schema == whole.schema for m in many)
    assert merged_parts("t.tsv", 2, many).equals(recover_with(table[:2], 6, settings, _echo))


def test_parts_that_miss_or_repeat_a_row_are_refused_naming_the_task_file():
    from carbon_vep.suite.recovery import recover_with
    from carbon_vep.suite.tasks import Part, merged_parts

    table = _part_table(["ACGTAC" * 10] * 5)
    shares = [recover_with(table, 6, RecoverySettings(), _echo, part=Part(i, 2)) for i in range(2)]
    with pytest.raises(InputError, match=r"t\.tsv: the parts hold 2 rows for the file's 5 "):
        merged_parts("t.tsv", 5, shares[:1])  # a part missing
    with pytest.raises(InputError, match="hold 7 rows for the file's 5"):
        merged_parts("t.tsv", 5, [*shares, shares[0]])  # a part twice
    for text in ("3/3", "1", "a/2", "-1/2"):
        with pytest.raises(ValueError, match="I/N with 0 <= I < N"):
            Part.parse(text)
    assert Part.parse("2/8") == Part(2, 8) and Part(2, 8).rows(30_000) == slice(7500, 11250)


def test_a_drafts_counts_are_summed_over_the_parts():
    """Ours (draft calls; accepted = rate x calls) and vLLM's (its counters) alike: the counts
    summed, the rates taken again from the sums, the strings kept."""
    from carbon_vep.suite.recovery import merged_speculative

    named = {"draft_model": "d", "engine": "transformers", "speculative_tokens": 5}
    ours = [
        {**named, "new_tokens": 100, "target_calls": 40, "draft_calls": 200,
         "tokens_per_target_call": 2.5, "acceptance_rate": 0.3},
        {**named, "new_tokens": 50, "target_calls": 10, "draft_calls": 50,
         "tokens_per_target_call": 5.0, "acceptance_rate": 0.8},
    ]  # fmt: skip
    assert merged_speculative(ours) == {
        **named,
        "new_tokens": 150,
        "target_calls": 50,
        "draft_calls": 250,
        "tokens_per_target_call": 3.0,
        "acceptance_rate": (60 + 40) / 250,
    }
    vllm = {
        "speculative_tokens": 5,
        "draft_tokens": 100,
        "accepted_tokens": 30,
        "acceptance_rate": 0.3,
    }
    other = {**vllm, "draft_tokens": 300, "accepted_tokens": 210, "acceptance_rate": 0.7}
    assert merged_speculative([vllm, other]) == {
        "speculative_tokens": 5, "draft_tokens": 400, "accepted_tokens": 240, "acceptance_rate": 0.6
    }  # fmt: skip


def test_merge_recovery_writes_the_one_jobs_table_and_metrics(tmp_path, caplog):
    """`carbon-vep merge-recovery` on the parts of a task file: the predictions and the metrics
    one job writes (the same metrics function on the same rows); parts that do not cover the
    file stop it with the file named and nothing written."""
    import json

    from carbon_vep.cli import main
    from carbon_vep.suite.recovery import recover_with
    from carbon_vep.suite.tasks import Part

    table = _part_table(["ACGTAC" * 10] * 5)
    tasks = tmp_path / "t.tsv"
    table.select("sequence", "label").write_csv(tasks, separator="\t")
    settings = RecoverySettings(accuracy_mode="prediction_length")
    parts = []
    for i in range(2):
        path = tmp_path / f"p{i}.parquet"
        recover_with(table, 6, settings, _echo, part=Part(i, 2)).write_parquet(path)
        parts.append(str(path))
    out, metrics = tmp_path / "predictions.parquet", tmp_path / "metrics.json"
    common = ["merge-recovery", "--tasks-file", str(tasks), "--task", "t", "--model-key", "m"]
    common += ["--accuracy-mode", "prediction_length", "--out", str(out), "--metrics", str(metrics)]
    assert main([*common, "--parts", *parts]) == 0
    whole = recover_with(table, 6, settings, _echo)
    assert pl.read_parquet(out).equals(whole)
    written = json.loads(metrics.read_text())
    expected = recovery_metrics(whole, settings)
    assert written["metrics"] == expected["metrics"] and written["by_type"] == expected["by_type"]
    assert (written["task"], written["model_key"]) == ("t", "m")
    out.unlink()
    metrics.unlink()
    assert main([*common, "--parts", parts[1]]) == 2
    assert f"{tasks}: the parts hold 3 rows for the file's 5" in caplog.text
    assert not out.exists() and not metrics.exists()


def test_merge_recovery_reads_no_prompt_of_the_task_file(tmp_path, monkeypatch):
    """merge-recovery needs the task file's row count, not its prompts (tens of thousands of
    6 kbp sequences): it reads neither the whole table nor the Parquet file's values, and
    writes what the parts and the whole table make."""
    import carbon_vep.suite.tasks
    from carbon_vep.cli import main
    from carbon_vep.suite.recovery import recover_with
    from carbon_vep.suite.tasks import Part

    table = _part_table(["ACGTAC" * 5] * 7)
    tasks = tmp_path / "t.parquet"
    table.select("sequence", "label").write_parquet(tasks)
    settings = RecoverySettings()
    parts = []
    for i in range(3):
        path = tmp_path / f"p{i}.parquet"
        recover_with(table, 6, settings, _echo, part=Part(i, 3)).write_parquet(path)
        parts.append(str(path))
    read_parquet = pl.read_parquet

    def parts_only(source, *args, **kwargs):
        assert Path(source) != tasks, "merge-recovery read the task file's values"
        return read_parquet(source, *args, **kwargs)

    def refused(*args, **kwargs):
        raise AssertionError("merge-recovery read the whole task table")

    monkeypatch.setattr(pl, "read_parquet", parts_only)
    monkeypatch.setattr(carbon_vep.suite.tasks, "read_task_table", refused)
    out, metrics = tmp_path / "predictions.parquet", tmp_path / "metrics.json"
    argv = ["merge-recovery", "--tasks-file", str(tasks), "--parts", *parts, "--task", "t"]
    assert main([*argv, "--model-key", "m", "--out", str(out), "--metrics", str(metrics)]) == 0
    monkeypatch.undo()
    assert pl.read_parquet(out).equals(recover_with(table, 6, settings, _echo))


# ---- rows that cannot be scored ---------------------------------------------------------------
def _table(sequences: list[str | None], labels: list[str | None]) -> pl.DataFrame:
    return pl.DataFrame({"sequence": sequences, "label": labels}).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("row_id"),
        pl.format("t.tsv:line {}", pl.int_range(pl.len()) + 2).alias("source"),
    )


def test_a_row_without_a_usable_prompt_is_invalid_and_not_generated():
    """An empty prompt (a sequence shorter than one 6-mer) and a prompt whose last 6-mer holds
    a non-ACGT base would have the model continue its prefix or an <oov>: both rows are
    `invalid` with their reason, never sent to the model, and out of the mean. A non-ACGT
    base earlier in the prompt is still scored, as published."""
    good = "ACGTAC" * 10
    table = _table([good, "ACG", good + "ACTR", "N" + good], ["ACGTAC" * 5] * 4)
    sent: list[str] = []

    def generate(prompts, leads):
        sent.extend(prompts)
        return ["ACGTAC" * 5 for _ in prompts]

    out = recover_with(table, 6, RecoverySettings(), generate)
    assert out["status"].to_list() == ["scored", "invalid", "invalid", "scored"]
    assert out["reason"][1].startswith("prompt shorter than one 6-mer (3 bp")
    assert out["reason"][2].startswith("non-ACGT base in the prompt's last 6-mer (ACACTR)")
    assert out["prediction"][1] is None and out["accuracy"][2] is None
    assert sent == [good, good]  # row 3's prompt is its last 60 bases (its N cut off)
    result = recovery_metrics(out, RecoverySettings(), EvaluationSettings(bootstrap=0))
    assert result["n_scored"] == 2 and result["metrics"]["accuracy"] == 1.0


def test_auto_refuses_labels_on_both_sides_of_the_rollout():
    """One short label among labels that cover the rollout would switch the whole table to
    the sequence tail under the published rule: refused, naming the rows, before any
    generation. An empty label is no label; explicit label sources are taken as given."""
    seqs = ["ACGTAC" * 10] * 3
    table = _table(seqs, ["ACGT", "ACGTAC" * 5, "ACGTAC" * 5])
    with pytest.raises(
        InputError, match=r"t\.tsv: label_source auto: 1 of 3 labels .*line 2: 4 bp"
    ):
        recover_with(table, 6, RecoverySettings(), _echo)
    dataset = recover_with(table, 6, RecoverySettings(label_source="dataset"), _echo)
    assert dataset["status"].to_list() == ["scored"] * 3  # its missing bases count as wrong
    empty = recover_with(
        _table(seqs, ["", "ACGTAC" * 5, "ACGTAC" * 5]), 6, RecoverySettings(), _echo
    )
    assert empty["label_source"].to_list() == ["dataset"] * 3
    assert empty["status"].to_list() == ["invalid", "scored", "scored"]


def test_a_table_with_no_row_to_score_is_refused():
    """No row left to generate: refused naming the file and the commonest reasons, rather than
    a null headline with exit 0."""
    table = _table(["ACG", "ACGTAC" * 10], ["ACGTAC" * 5, None])
    with pytest.raises(InputError, match=r"t\.tsv: none of the 2 rows can be scored \(1 × "):
        recover_with(table, 6, RecoverySettings(label_source="dataset"), _echo)


def test_score_recovery_with_no_row_to_score_stops_before_the_model_loads(tmp_path, caplog):
    """The command exits 2 with one ERROR naming the file, writes nothing, and loads no model
    (the model named does not exist)."""
    tasks = tmp_path / "rec.tsv"
    tasks.write_text("sequence\tlabel\nACGTACGTACGTACGTAAAA\t\n\tACGT\n")
    out, metrics = tmp_path / "r.parquet", tmp_path / "r.json"
    argv = ["score-recovery", "--tasks-file", str(tasks), "--model", str(tmp_path / "none")]
    argv += ["--label-source", "dataset", "--out", str(out), "--metrics", str(metrics)]
    assert main([*argv, "--task", "r", "--model-key", "m"]) == 2
    (error,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert str(tasks) in error and "none of the 2 rows can be scored" in error
    assert "missing sequence or label" in error
    assert not out.exists() and not metrics.exists()
