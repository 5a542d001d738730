"""Genomic-NIAH on a model: one prefill per row equals the published three passes, a known
answer from a copying test double, YaRN as published, the command's errors and its parts."""

import json
import warnings
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from support.files import random_dna, write_fasta
from transformers import LlamaConfig

from carbon_vep.cli import main
from carbon_vep.config.stages import ModelSettings
from carbon_vep.errors import TokenizerMismatchError
from carbon_vep.model.attention import LOWER_RIGHT_SDPA, register
from carbon_vep.model.engine import Engine
from carbon_vep.model.loading import Yarn, apply_yarn, load_model
from carbon_vep.model.tokens import dna_block_ids
from carbon_vep.suite.niah import NiahScorer, greedy_prefix, score_rows
from carbon_vep.suite.niah_build import CellSpec, write_cell
from carbon_vep.suite.niah_cells import prompt_tokens, read_cell
from carbon_vep.suite.niah_published import three_pass_cell_row

DEMO_FASTA = Path(__file__).resolve().parents[2] / "resources/demo/chr17.hg19.part.fa"


@pytest.fixture(scope="module")
def cell_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("niah") / "niah_neardup_d2.parquet"
    write_cell(CellSpec("neardup_d2", 300, 8, seed=2), DEMO_FASTA, path)
    return path


@pytest.fixture(scope="module")
def cell(cell_path) -> pl.DataFrame:
    return read_cell(cell_path, task="neardup_d2")


def _engine(loaded, batch_size=4) -> Engine:
    return Engine(loaded.model, loaded.vocab, loaded.device, batch_size=batch_size)


# ---- one prefill == three passes -------------------------------------------------------------
@pytest.fixture(scope="module")
def published(loaded, cell) -> list:
    """The published three passes of each row (under sdpa), once for every case below."""
    return [three_pass_cell_row(loaded, row) for row in cell.iter_rows(named=True)]


@pytest.mark.parametrize(
    ("batch_size", "chunk", "attention"),
    [
        (1, 0, "sdpa"),
        (4, 64, "sdpa"),
        (4, 64, LOWER_RIGHT_SDPA),
        (6, 37, LOWER_RIGHT_SDPA),
        (4, 2048, "sdpa"),  # rows of ~300 tokens: four a batch, each prompt whole
    ],
)
def test_one_prefill_equals_the_published_three_passes(
    loaded, cell, published, batch_size, chunk, attention
):
    """Whole or in chunks, a row or several a batch, under transformers' sdpa or the jobs'
    lower-right bias (model.attention), which the NIAH jobs load with."""
    scorer = NiahScorer(_engine(loaded, batch_size), loaded.tokenizer, prefill_chunk=chunk)
    loaded.model.set_attn_implementation(register() if attention == LOWER_RIGHT_SDPA else "sdpa")
    try:
        ours = score_rows(cell, scorer, batch_size)
    finally:
        loaded.model.set_attn_implementation("sdpa")
    rows = zip(cell.iter_rows(named=True), ours.iter_rows(named=True), published, strict=True)
    for row, mine, ref in rows:
        assert mine["uid"] == row["uid"] and mine["status"] == "scored"
        assert mine["pred"] == ref.pred and len(mine["pred"]) == 24
        assert mine["gen_exact_match"] == int(ref.pred == row["value"])
        assert mine["target_ll"] == pytest.approx(ref.target_ll, abs=1e-5)
        assert mine["negative_ll"] == pytest.approx(ref.negative_ll, abs=1e-5)
        assert mine["ll_correct"] == (ref.target_ll > ref.negative_ll)


def _scored(loaded, row: dict, implementation: str) -> tuple:
    """The row's answer under `implementation`, the hidden states its greedy tokens were
    picked from [n, H], both continuations' rows [2, 1, n, H] and the body's passes after the
    prefill (the prompt prefilled whole: one pass)."""
    scorer = NiahScorer(_engine(loaded, 1), loaded.tokenizer)
    states, rows, passes = [], [], []
    forward, likelihoods = scorer.engine.forward, scorer.mean_log_likelihoods
    next_token = scorer.next_token
    scorer.engine.forward = lambda *a, **k: passes.append(1) or forward(*a, **k)
    scorer.next_token = lambda h: states.append(h) or next_token(h)
    scorer.mean_log_likelihoods = lambda r, v: rows.append(r) or likelihoods(r, v)
    loaded.model.set_attn_implementation(
        register() if implementation == LOWER_RIGHT_SDPA else "sdpa"
    )
    try:
        [answer] = scorer.score_batch([row["prompt"]], [row["value"]], [row["negative_value"]])
    finally:
        loaded.model.set_attn_implementation("sdpa")
    after_prefill = len(passes) - 1
    if after_prefill < 5:  # the branch pass picked after each guessed token at once
        kept = len(row["value"]) // 6 - after_prefill  # the guessed tokens kept
        states[1] = states[1][:kept]
    return answer, torch.cat(states), rows[0], after_prefill


@pytest.mark.parametrize(("guessed_bp", "passes"), [(24, 1), (12, 2), (0, 3)])
def test_the_branch_pass_keeps_the_guess_while_it_is_greedy(loaded, cell, guessed_bp, passes):
    """Under the jobs' attention the first decode step's pass carries both continuations and
    a guess at the generation (the first greedy token, then the value's tokens 2 and 3,
    model.attention.branch_mask). A value whose first `guessed_bp` bases are the model's own
    greedy output is kept that far: 1 pass after the prefill when the whole value is (a model
    that retrieves the needle), 2 when half is, 3 when none is (a pass a token and a pass a
    continuation: 5). Either way the prediction is the greedy one of a pass a token, and both
    continuations' rows and likelihoods are those of a pass a continuation (1e-5)."""
    row = cell.row(0, named=True)
    greedy = _scored(loaded, row, "sdpa")[0].pred
    value = greedy[:guessed_bp] + row["value"][guessed_bp:]
    assert value != greedy or guessed_bp == 24
    row = row | {"value": value}
    (ours, states, rows, ours_passes), (one, one_states, one_rows, one_passes) = (
        _scored(loaded, row, name) for name in (LOWER_RIGHT_SDPA, "sdpa")
    )
    assert (ours_passes, one_passes) == (passes, 5)
    assert ours.pred == one.pred == greedy
    # each greedy token picked from the state a pass a token gives it: the cache cropped back
    # to the prompt and the kept tokens, at their positions
    assert states.shape == one_states.shape == (4, 64)
    assert torch.allclose(states, one_states, atol=1e-5)
    assert rows.shape[:3] == (2, 1, 4) and torch.allclose(rows, one_rows, atol=1e-5)
    assert ours.target_ll == pytest.approx(one.target_ll, abs=1e-5)
    assert ours.negative_ll == pytest.approx(one.negative_ll, abs=1e-5)


@pytest.mark.parametrize("attention", [LOWER_RIGHT_SDPA, "sdpa"])
def test_the_passes_after_the_prefill_run_without_cudnn_attention(loaded, cell, attention):
    """A batch's prefill keeps SDPA's own choice of kernel; the small passes after it (the
    branch pass, decode steps, continuations) come in shapes of this batch alone, so they run
    with cuDNN's attention off (a plan a new shape, model.attention.without_cudnn), branch
    pass or not, and the switch is back as it was afterwards."""
    scorer = NiahScorer(_engine(loaded, 1), loaded.tokenizer)
    forward, seen = scorer.engine.forward, []

    def forward_noting_cudnn(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return forward(*args, **kwargs)

    scorer.engine.forward = forward_noting_cudnn
    row = cell.row(0, named=True)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    loaded.model.set_attn_implementation(register() if attention == LOWER_RIGHT_SDPA else "sdpa")
    try:
        scorer.score_batch([row["prompt"]], [row["value"]], [row["negative_value"]])
    finally:
        loaded.model.set_attn_implementation("sdpa")
    assert seen[0] == before  # the prefill, whole: one pass
    assert len(seen) >= 2 and not any(seen[1:])
    assert torch.backends.cuda.cudnn_sdp_enabled() == before


def test_a_guess_is_kept_while_every_row_picked_it():
    guess = torch.tensor([[7, 1, 2, 3], [8, 1, 2, 3]])
    assert greedy_prefix(guess, torch.tensor([[1, 2, 3, 9], [1, 2, 3, 4]])) == 4
    assert greedy_prefix(guess, torch.tensor([[1, 2, 9, 9], [1, 2, 3, 4]])) == 3
    # one row's miss stops every row; a miss stops what follows, even where it agrees again
    assert greedy_prefix(guess, torch.tensor([[1, 2, 3, 9], [1, 0, 3, 4]])) == 2
    assert greedy_prefix(guess, torch.tensor([[9, 2, 3, 9], [9, 2, 3, 4]])) == 1
    assert greedy_prefix(guess[:, :1], torch.tensor([[5], [6]])) == 1


def test_the_published_passes_call_the_model_as_the_official_script(loaded, cell, monkeypatch):
    """genome_niah_eval.py's calls: `generate` greedy for value_len_bp // 6 new tokens with its
    two logits processors (special ids, then the 6-mer block), and each likelihood pass through
    the body with the output layer on the value's positions only, never a whole prompt's."""
    row = cell.row(0, named=True)
    model_class = type(loaded.model)
    original, seen, widths = model_class.generate, {}, []

    def generate(self, *args, **kwargs):
        seen.update(kwargs)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(model_class, "generate", generate)
    head = loaded.model.lm_head.register_forward_hook(lambda m, a, out: widths.append(out.shape))
    try:
        answer = three_pass_cell_row(loaded, row)
    finally:
        head.remove()
    tokens = row["value_len_bp"] // 6
    assert seen["max_new_tokens"] == tokens and seen["do_sample"] is False
    assert [type(p).__name__ for p in seen["logits_processor"]] == [
        "SuppressSpecial",
        "RestrictToDna",
    ]
    assert all(shape[1] <= tokens for shape in widths)  # no [prompt, vocabulary] logits
    assert [tuple(s[:2]) for s in widths[-2:]] == [(1, tokens), (1, tokens)]
    assert len(answer.pred) == row["value_len_bp"]


def test_the_published_block_is_read_as_the_official_script(tmp_path):
    """dna_start_id + the DNA tags listed before the 6-mers (Carbon's `dna_special_tokens`),
    4,096 ids; no dna_config.json, no restriction."""
    from types import SimpleNamespace

    from carbon_vep.suite.niah_published import dna_token_range

    carbon = {
        "k": 6,
        "dna_start_id": 151_669,
        "dna_vocab_size": 4_107,
        "dna_special_tokens": ["<dna>", "</dna>", "<oov>"],
    }
    (tmp_path / "dna_config.json").write_text(json.dumps(carbon))
    assert dna_token_range(SimpleNamespace(name_or_path=str(tmp_path))) == (151_672, 4_096)
    empty = tmp_path / "plain"
    empty.mkdir()
    assert dna_token_range(SimpleNamespace(name_or_path=str(empty))) is None


def test_generation_is_restricted_to_the_dna_block(loaded, cell):
    scorer = NiahScorer(_engine(loaded), loaded.tokenizer)
    block = dna_block_ids(loaded.tokenizer, loaded.vocab)
    assert block is not None and len(block) == 4096
    assert np.array_equal(np.sort(block), np.sort(loaded.vocab.kmer_ids))
    with torch.inference_mode():
        # a hidden state pointing at a text token: the restriction must still pick a 6-mer
        text_row = loaded.model.get_output_embeddings().weight[100][None]
        chosen = int(scorer.next_token(text_row * 50)[0])
        scorer.allowed = None
        free = int(scorer.next_token(text_row * 50)[0])
    assert chosen in set(block.tolist())
    assert free == 100  # unrestricted: the text token wins, as it would in the published path


def test_dna_block_is_none_without_dna_config_and_checked_against_the_tokenizer(
    loaded, monkeypatch
):
    from carbon_vep.model import tokens

    monkeypatch.setattr(tokens, "_read_dna_config", lambda tok: {})
    assert dna_block_ids(loaded.tokenizer, loaded.vocab) is None
    monkeypatch.setattr(tokens, "_read_dna_config", lambda tok: {"k": 6, "first_kmer_id": 5})
    with pytest.raises(TokenizerMismatchError, match="not the tokenizer's k-mer ids"):
        dna_block_ids(loaded.tokenizer, loaded.vocab)


# ---- a known answer: a test double that copies after a key it has seen -----------------------
class CopyingBody(torch.nn.Module):
    """An induction head at the model interface: at each position it predicts the token that
    followed the previous occurrence of the last `width` tokens, if that occurrence is at most
    `reach` tokens back; else the k-mer AAAAAA. Token history lives in a real DynamicCache."""

    def __init__(self, out_weight: torch.Tensor, fallback: int, width: int, reach: int):
        super().__init__()
        self.out_weight, self.fallback, self.width, self.reach = out_weight, fallback, width, reach

    def forward(self, input_ids, attention_mask=None, cache=None, use_cache=None, **kwargs):
        ids = input_ids.float()[:, None, :, None]
        past = cache.get_seq_length() if cache is not None else 0
        full = cache.update(ids, ids, 0)[0][:, 0, :, 0].long() if cache is not None else ids
        full = full.reshape(input_ids.shape[0], -1)
        hidden = torch.stack(
            [
                torch.stack([self._predict(seq, p) for p in range(past, seq.shape[0])])
                for seq in full
            ]
        )
        return type("Out", (), {"__getitem__": lambda s, i: hidden, "cache": cache})()

    def _predict(self, seq: torch.Tensor, p: int) -> torch.Tensor:
        w = self.width
        target = self.fallback
        if p + 1 >= w:
            last = seq[p - w + 1 : p + 1]
            for j in range(p - w, max(-1, p - w - self.reach), -1):  # nearest occurrence first
                if torch.equal(seq[j : j + w], last):
                    target = int(seq[j + w])
                    break
        return 20.0 * self.out_weight[target]


class CopyingModel(torch.nn.Module):
    def __init__(self, vocab, vocab_size: int, reach: int):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        weight = torch.zeros(vocab_size, 64)
        rows = torch.randn(len(vocab.kmer_ids), 64, generator=generator)
        weight[torch.as_tensor(vocab.kmer_ids)] = rows / rows.norm(dim=1, keepdim=True)
        self.head = torch.nn.Linear(64, vocab_size, bias=False)
        self.head.weight.data = weight
        fallback = int(vocab.kmer_ids[0])  # AAAAAA
        self.body = CopyingBody(self.head.weight, fallback, width=4, reach=reach)
        self.config = LlamaConfig(
            num_hidden_layers=1,
            hidden_size=64,
            num_attention_heads=1,
            max_position_embeddings=1 << 20,
        )

    def get_output_embeddings(self):
        return self.head

    def get_decoder(self):
        return self.body


def test_known_answer_copying_model_retrieves_what_it_can_reach(loaded, cell):
    """Rows whose planted key lies within the double's reach are retrieved exactly (exact
    match 1, all bases right); the others get AAAAAA... (exact match 0)."""
    reach = 150
    model = CopyingModel(loaded.vocab, loaded.model.get_output_embeddings().weight.shape[0], reach)
    engine = Engine(model, loaded.vocab, torch.device("cpu"), batch_size=2)
    rows = score_rows(cell, NiahScorer(engine, loaded.tokenizer, prefill_chunk=50), 2)
    expected = []
    for row in cell.iter_rows(named=True):
        key = row["prompt"][-24:]
        planted = row["prompt"].index(key + row["value"]) // 6 + 1  # the key's first token
        query_end = len(row["prompt"]) // 6  # the prompt's last token position
        expected.append(int(query_end - 3 - planted <= reach))
    assert rows["gen_exact_match"].to_list() == expected
    assert 0 < sum(expected) < len(expected)  # the cell holds rows of both kinds
    for row, got in zip(cell.iter_rows(named=True), rows.iter_rows(named=True), strict=True):
        assert (got["pred"] == row["value"]) == bool(got["gen_exact_match"])
        if got["gen_exact_match"]:
            assert got["gen_base_accuracy"] == 1.0 and got["ll_correct"]
        else:
            assert got["pred"] == "A" * 24


def test_without_reach_nothing_is_retrieved(loaded, cell):
    model = CopyingModel(loaded.vocab, loaded.model.get_output_embeddings().weight.shape[0], 0)
    engine = Engine(model, loaded.vocab, torch.device("cpu"), batch_size=2)
    rows = score_rows(cell, NiahScorer(engine, loaded.tokenizer), 2)
    assert rows["gen_exact_match"].to_list() == [0] * cell.height


# ---- YaRN ----------------------------------------------------------------------------------
def test_yarn_override_is_written_exactly_as_published():
    config = LlamaConfig(
        rope_parameters={"rope_type": "default", "rope_theta": 5e6}, max_position_embeddings=32768
    )
    apply_yarn(config, 4, 32768, 65536)
    published = {
        "rope_type": "yarn",
        "type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
        "rope_theta": 5e6,
    }
    assert config.max_position_embeddings == 65536
    assert config.rope_parameters == published
    assert config.rope_scaling == published


def test_yarn_on_a_checkpoint_of_another_length_is_named(caplog):
    """The published override assumes a 32,768-position checkpoint; on one trained on 8,192
    positions (the demo model's) the scaling would start past positions it never saw: said."""
    config = LlamaConfig(
        rope_parameters={"rope_type": "default", "rope_theta": 5e6}, max_position_embeddings=8192
    )
    with caplog.at_level("WARNING", logger="carbon_vep"):
        apply_yarn(config, 4, 32768, 65536)
    assert "original positions (32,768) are not the checkpoint's" in caplog.text
    assert "max_position_embeddings (8,192)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="carbon_vep"):
        apply_yarn(LlamaConfig(max_position_embeddings=32768), 4, 32768, 65536)
    assert not caplog.text


def test_yarn_reaches_the_loaded_model(demo_model_dir):
    settings = ModelSettings(str(demo_model_dir), trust_remote_code=True)
    loaded = load_model(settings, Yarn(4.0, 8192, 16384))
    rotary = loaded.model.model.rotary_emb
    assert rotary.rope_type == "yarn" and rotary.attention_scaling > 1
    assert loaded.model.config.max_position_embeddings == 16384
    plain = load_model(settings)
    assert plain.model.model.rotary_emb.rope_type == "default"


def test_the_reference_job_extends_the_context_as_our_jobs_do(demo_model_dir):
    """benchmark.reference_job's YaRN flags (the official script's `--with_yarn` override, its
    constants as flags) build the rotary embedding our jobs build from the same settings."""
    from carbon_vep.benchmark.reference_job import load

    yarn = {"factor": 4.0, "original_positions": 8192, "max_positions": 16384}
    official, _ = load(str(demo_model_dir), "float32", "cpu", yarn)
    settings = ModelSettings(str(demo_model_dir), trust_remote_code=True)
    ours = load_model(settings, Yarn(4.0, 8192, 16384)).model
    assert official.config.rope_parameters == ours.config.rope_parameters
    assert official.config.max_position_embeddings == ours.config.max_position_embeddings == 16384
    theirs, mine = official.model.rotary_emb, ours.model.rotary_emb
    assert theirs.rope_type == mine.rope_type == "yarn"
    assert theirs.attention_scaling == mine.attention_scaling > 1
    assert torch.equal(theirs.inv_freq, mine.inv_freq)
    native, _ = load(str(demo_model_dir), "float32", "cpu")
    assert native.model.rotary_emb.rope_type == "default"


def test_the_reference_jobs_yarn_flags(cell_path, demo_model_dir, tmp_path):
    """`--yarn-factor F --yarn-original-positions N --yarn-max-positions M` reach the record;
    a factor alone is refused."""
    from carbon_vep.benchmark import reference_job

    cell = tmp_path / "cell.parquet"
    pl.read_parquet(cell_path).head(1).write_parquet(cell)
    argv = ["--task", "niah", "--model", str(demo_model_dir), "--dtype", "float32"]
    argv += ["--device", "cpu", "--cell", str(cell), "--out", str(tmp_path / "a.parquet")]
    argv += ["--record", str(tmp_path / "r.json"), "--yarn-factor", "4"]
    with pytest.raises(SystemExit, match="needs --yarn-original-positions"):
        reference_job.main(argv)
    record = reference_job.main(
        [*argv, "--yarn-original-positions", "8192", "--yarn-max-positions", "16384"]
    )
    assert record["yarn"] == {"factor": 4.0, "original_positions": 8192, "max_positions": 16384}
    assert pl.read_parquet(tmp_path / "a.parquet").height == 1


# ---- the command ---------------------------------------------------------------------------
def _score(cell_path, model_dir, out: Path, *extra) -> int:
    return main(
        [
            "score-niah",
            "--tasks-file",
            str(cell_path),
            "--model",
            str(model_dir),
            "--trust-remote-code",
            "--task",
            "niah_cell",
            "--model-key",
            "demo",
            "--out",
            str(out / "rows.parquet"),
            "--metrics",
            str(out / "m.json"),
            "--bootstrap",
            "0",
            *extra,
        ]
    )


@pytest.mark.parametrize("span", ["6:20", "20:30"])
def test_a_row_range_past_the_cell_is_refused_before_the_model(cell_path, tmp_path, span, caplog):
    """A range reaching past the cell's 8 rows (a niah entry's `rows` above a Hub cell's) is
    refused naming the cell and its rows, before the model loads (the model path here does not
    exist), and nothing is written; it used to score the rows left, or none."""
    out = tmp_path / "out"
    assert _score(cell_path, tmp_path / "no_model", out, "--row-range", span) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [
        f"{cell_path}: row range {span} reaches past the cell's 8 rows"
        + (" (0:8); under the workflow, a niah entry's `rows` must not exceed them")
    ]
    assert not out.exists()


def test_score_niah_parts_merge_to_the_whole(cell_path, demo_model_dir, tmp_path, caplog):
    times_json = tmp_path / "times.json"
    assert _score(cell_path, demo_model_dir, tmp_path / "whole", "--times", str(times_json)) == 0
    # the job's start-up and scoring times, as a record the benchmarks read
    times = json.loads(times_json.read_text())
    assert times["rows"] == 8 and times["engine"] == "transformers"
    assert times["score_s"] > 0 and times["start_s"] > 0
    parts = []
    for i, span in enumerate(("0:5", "5:8")):
        assert _score(cell_path, demo_model_dir, tmp_path / f"p{i}", "--row-range", span) == 0
        parts.append(str(tmp_path / f"p{i}" / "rows.parquet"))
    merged = tmp_path / "merged"
    code = main(
        [
            "merge-niah",
            "--cell",
            str(cell_path),
            "--parts",
            *parts,
            "--task",
            "niah_cell",
            "--model-key",
            "demo",
            "--bootstrap",
            "0",
            "--out",
            str(merged / "rows.parquet"),
            "--metrics",
            str(merged / "m.json"),
        ]
    )
    assert code == 0
    whole = pl.read_parquet(tmp_path / "whole/rows.parquet")
    assert pl.read_parquet(merged / "rows.parquet").equals(whole)
    metrics = json.loads((tmp_path / "whole/m.json").read_text())
    assert metrics["kind"] == "genomic_niah" and metrics["n_scored"] == 8
    assert metrics["headline_metrics"] == ["gen_exact_match"]  # ll_correct: a sanity check
    assert "inflated" in metrics["definitions"]["ll_correct"]
    assert metrics["metrics"] == json.loads((merged / "m.json").read_text())["metrics"]
    assert "depth" in whole.columns and whole["task"].unique().to_list() == ["neardup_d2"]
    # a part missing: refused, nothing written
    code = main(
        [
            "merge-niah",
            "--cell",
            str(cell_path),
            "--parts",
            parts[0],
            "--task",
            "x",
            "--model-key",
            "demo",
            "--out",
            str(tmp_path / "bad.parquet"),
            "--metrics",
            str(tmp_path / "bad.json"),
        ]
    )
    assert code == 2 and not (tmp_path / "bad.parquet").exists()
    # a part twice: refused the same way, naming the cell (suite.tasks.require_each_once)
    twice = ["merge-niah", "--cell", str(cell_path), "--parts", *parts, parts[0]]
    twice += ["--task", "x", "--model-key", "demo", "--out", str(tmp_path / "bad.parquet")]
    with caplog.at_level("ERROR", logger="carbon_vep"):
        assert main([*twice, "--metrics", str(tmp_path / "bad.json")]) == 2
    assert f"{cell_path}: the parts hold 13 rows for the cell's 8 uids" in caplog.text
    assert not (tmp_path / "bad.parquet").exists()


def test_the_plain_call_on_a_hub_cell_names_its_results(cell_path, demo_model_dir, tmp_path):
    """A cell as the Hub ships it (no `task` column, named by its config): score-niah with no
    --task / --model-key files it under the config name and the model directory's name."""
    hub_cell = tmp_path / "niah_neardup_d2_300.parquet"
    pl.read_parquet(cell_path).drop("task").write_parquet(hub_cell)
    out = tmp_path / "o"
    code = main(
        [
            "score-niah",
            "--tasks-file",
            str(hub_cell),
            "--model",
            str(demo_model_dir),
            "--trust-remote-code",
            "--out",
            str(out / "rows.parquet"),
            "--metrics",
            str(out / "m.json"),
            "--bootstrap",
            "0",
        ]
    )
    assert code == 0
    metrics = json.loads((out / "m.json").read_text())
    assert metrics["task"] == "niah_neardup_d2_300"
    assert metrics["model_key"] == demo_model_dir.name
    assert pl.read_parquet(out / "rows.parquet")["task"].unique().to_list() == ["neardup_d2"]
    # a file name that is no config name: the task must be named
    (tmp_path / "cell.parquet").write_bytes(hub_cell.read_bytes())
    code = main(
        [
            "score-niah",
            "--tasks-file",
            str(tmp_path / "cell.parquet"),
            "--model",
            str(demo_model_dir),
            "--trust-remote-code",
            "--out",
            str(out / "r2.parquet"),
            "--metrics",
            str(out / "m2.json"),
        ]
    )
    assert code == 2 and not (out / "r2.parquet").exists()


def test_context_beyond_the_model_needs_yarn(demo_model_dir, tmp_path, caplog):
    genome = write_fasta(tmp_path / "g.fa", {"c": random_dna(50_000, 3)})
    long_cell = tmp_path / "long.parquet"
    write_cell(CellSpec("niah", 8200, 1, 0), genome, long_cell)  # the demo model has 8,192
    assert _score(long_cell, demo_model_dir, tmp_path / "o") == 2
    assert "8,200 tokens" in caplog.text and "--yarn-factor 4" in caplog.text
    assert "8,192 positions" in caplog.text
    assert not (tmp_path / "o/rows.parquet").exists()


def test_a_cell_at_the_models_exact_native_context_runs_without_yarn(
    demo_model_dir, tmp_path, caplog
):
    """As the official evaluation runs Carbon-3B's 32k cell on its 32,768 positions: the demo
    model's 8,192 positions, a cell of 8,192 tokens, whose row needs the prefix and the value
    beyond them (the Hub's 32k cell needs 32,773 tokens, measured; our builder fills the
    context exactly, so the cell is built 5 tokens longer and declared at 8,192). It runs
    natively; the tokens past the positions are warned about and recorded."""
    genome = write_fasta(tmp_path / "g.fa", {"c": random_dna(60_000, 4)})
    built = tmp_path / "built.parquet"
    write_cell(CellSpec("niah", 8197, 1, 0), genome, built)
    native = tmp_path / "native.parquet"
    pl.read_parquet(built).with_columns(
        context_length_tokens=pl.lit(8192, dtype=pl.Int64)
    ).write_parquet(native)
    needed = prompt_tokens(pl.read_parquet(native), 6)
    assert needed > 8192  # the case at hand: the declared context fits, the row does not
    assert _score(native, demo_model_dir, tmp_path / "o") == 0
    rows = pl.read_parquet(tmp_path / "o/rows.parquet")
    assert rows["status"].to_list() == ["scored"] and rows["pred"][0]
    parameters = json.loads((tmp_path / "o/m.json").read_text())["parameters"]
    assert parameters["tokens_past_positions"] == needed - 8192
    assert parameters["yarn_factor"] == 0
    assert f"{needed - 8192} past them" in caplog.text


def test_scoring_uses_the_current_cache_argument(loaded, cell):
    """transformers 5.24 deprecates `past_key_values` (removed in 5.40): no warning of it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        score_rows(cell.head(2), NiahScorer(_engine(loaded), loaded.tokenizer), 2)
    assert not [w for w in caught if "past_key_values" in str(w.message)]


def test_a_model_without_a_6mer_block_is_named(
    cell_path, demo_model_dir, tmp_path, caplog, monkeypatch
):
    from carbon_vep.model import loading

    def no_block(tokenizer):
        raise TokenizerMismatchError("no contiguous block of 4**k pure-ACGT k-mer tokens")

    monkeypatch.setattr(loading, "dna_vocab", no_block)
    assert _score(cell_path, demo_model_dir, tmp_path / "o") == 2
    assert f"{demo_model_dir}: not a 6-mer DNA tokenizer: no contiguous block" in caplog.text
    assert not (tmp_path / "o/rows.parquet").exists()


def test_a_niah_job_holds_no_copy_of_the_kmer_rows(loaded, cell):
    """The output layer's k-mer rows (25 MB for Carbon-3B) are copied only for the paths that
    use them: after the start-up probe and a NIAH batch the engine holds none (on the H200 they
    were the whole of NIAH's GPU peak above the official script's), and a path that does use
    them keeps one copy."""
    from carbon_vep.model.probe import verify_output_layer

    engine = _engine(loaded)
    verify_output_layer(engine, loaded.vocab.encode("ACGTAC" * 8))
    score_rows(cell.head(2), NiahScorer(engine, loaded.tokenizer), 2)
    rows_shape = (4**engine.k, engine.out_weight.shape[1])

    def copies_held() -> int:
        held = [v for value in vars(engine).values() for v in (value, *_items(value))]
        return sum(isinstance(v, torch.Tensor) and tuple(v.shape) == rows_shape for v in held)

    assert copies_held() == 0
    engine.sequence_scores(["ACGTAC" * 4], "token", "dna_block")
    assert copies_held() == 1 and engine.dna_weight is engine.dna_weight  # kept, one copy


def _items(value) -> tuple:
    return tuple(value) if isinstance(value, tuple) else ()
