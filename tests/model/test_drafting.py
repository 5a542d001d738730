"""Speculative decoding: the draft's output is the target's greedy output, the acceptance it
records, a draft with another tokenizer refused, and the config's draft key resolved for jobs."""

import json
import shlex
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
import torch
from transformers import LlamaForCausalLM

from carbon_vep.cli import main
from carbon_vep.config.run import ConfigError, RunConfig
from carbon_vep.config.stages import ModelSettings, RecoverySettings
from carbon_vep.model import drafting, loading
from carbon_vep.model.attention import LOWER_RIGHT_SDPA
from carbon_vep.model.demo import build_demo_model
from carbon_vep.model.drafting import Draft, DraftMismatchError, check_draft, load_draft
from carbon_vep.model.loading import LoadedModel, load_model
from carbon_vep.model.vllm import engine_arguments, speculative_record
from carbon_vep.suite.rollouts import generate_continuations
from carbon_vep.workflow.jobs import Jobs

ROLLOUT = 48  # tokens: 288 bp


class WrongEveryThird(LlamaForCausalLM):
    """A draft that proposes a token the target never picks at every third position, so the
    target must reject and replace some proposals and accept others."""

    wrong_id = 0

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        positions = kwargs["position_ids"][0, -out.logits.shape[1] :]
        out.logits[:, positions % 3 == 0, self.wrong_id] = 1e4
        return out


def _prompts(n: int, bp: int) -> list[str]:
    rng = np.random.default_rng(4)
    return ["".join(np.array(list("ACGT"))[rng.integers(0, 4, bp)]) for _ in range(n)]


@pytest.fixture(scope="module")
def one_layer_draft(tmp_path_factory) -> Path:
    return build_demo_model(tmp_path_factory.mktemp("draft") / "draft", num_layers=1, seed=7)


def _wrong_draft(path: Path, loaded: LoadedModel) -> LoadedModel:
    model = WrongEveryThird.from_pretrained(path).eval()
    model.wrong_id = int(loaded.vocab.kmer_ids[-1])  # TTTTTT: a k-mer the target can emit
    return LoadedModel(model, loaded.tokenizer, loaded.vocab, loaded.device, loaded.settings)


def test_drafted_rollouts_equal_the_targets_greedy_ones(loaded, one_layer_draft):
    prompts = _prompts(2, 300)
    settings = RecoverySettings(new_tokens=ROLLOUT, score_bp=ROLLOUT * 6)
    plain = generate_continuations(loaded, prompts, settings, batch_size=2)
    for draft_model in (
        load_model(ModelSettings(str(one_layer_draft), trust_remote_code=True)),
        _wrong_draft(one_layer_draft, loaded),
    ):
        draft = Draft(draft_model, tokens=4)
        assert generate_continuations(loaded, prompts, settings, 2, draft=draft) == plain
        record = draft.record()
        assert record["new_tokens"] == 2 * ROLLOUT
        # every target call adds exactly one token of its own beside the accepted proposals
        assert record["target_calls"] <= record["new_tokens"]
        assert 0 <= record["acceptance_rate"] <= 1
    # the every-third-wrong draft is rejected at least a third of the time, accepted sometimes
    assert 0 < record["acceptance_rate"] < 0.8
    assert record["tokens_per_target_call"] > 1


def test_draft_with_another_tokenizer_is_refused_naming_both(loaded):
    class OtherTokenizer(dict):
        def get_vocab(self) -> dict:
            return dict(self)

    tokenizer = OtherTokenizer(loaded.tokenizer.get_vocab(), extra_token=10**6)
    draft = LoadedModel(None, tokenizer, loaded.vocab, loaded.device, loaded.settings)
    with pytest.raises(DraftMismatchError, match=r"small-draft: cannot draft for big-target"):
        check_draft(loaded, draft, "big-target", "small-draft")
    shifted = SimpleNamespace(**{**loaded.vocab.__dict__, "kmer_ids": loaded.vocab.kmer_ids[::-1]})
    same_words = LoadedModel(None, loaded.tokenizer, shifted, loaded.device, loaded.settings)
    with pytest.raises(DraftMismatchError, match="k-mer tokens sit at different ids"):
        check_draft(loaded, same_words, "t", "d")


def test_load_draft_is_none_without_one_and_checked_with_one(loaded, one_layer_draft):
    assert load_draft(loaded.settings, loaded) is None
    spec = ModelSettings(
        loaded.settings.path,
        trust_remote_code=True,
        draft_model=str(one_layer_draft),
        num_speculative_tokens=3,
    )
    draft = load_draft(spec, loaded)
    assert draft.tokens == 3 and draft.loaded.model.config.num_hidden_layers == 1


def test_score_recovery_with_a_draft_predicts_the_same_and_records_it(
    tmp_path, demo_model_dir, one_layer_draft, monkeypatch
):
    attentions = []  # every model the jobs load: its attention implementation

    def spied(load):
        def load_noting_attention(*args, **kwargs):
            loaded = load(*args, **kwargs)
            attentions.append(loaded.model.config._attn_implementation)
            return loaded

        return load_noting_attention

    for module in (loading, drafting):
        monkeypatch.setattr(module, "load_model", spied(module.load_model))
    rows = [{"sequence": s, "label": s[-30:], "type": "x"} for s in _prompts(1, 120)]
    pl.DataFrame(rows).write_parquet(tmp_path / "rec.parquet")

    def run(name: str, *extra: str) -> dict:
        outputs = [
            "--out",
            str(tmp_path / f"{name}.parquet"),
            "--metrics",
            str(tmp_path / f"{name}.json"),
        ]
        model = ["--model-key", "demo", "--model", str(demo_model_dir), "--trust-remote-code"]
        argv = ["score-recovery", "--tasks-file", str(tmp_path / "rec.parquet"), "--task", "rec"]
        argv += [*model, "--new-tokens", "12", "--bootstrap", "0", *outputs, *extra]
        assert main(argv) == 0
        return json.loads((tmp_path / f"{name}.json").read_text())

    plain = run("plain")
    drafted = run("drafted", "--draft-model", str(one_layer_draft), "--num-speculative-tokens", "4")
    assert "speculative" not in plain
    record = drafted["speculative"]
    assert record["draft_model"] == str(one_layer_draft) and record["speculative_tokens"] == 4
    assert record["new_tokens"] == 12
    predictions = [
        pl.read_parquet(tmp_path / f"{n}.parquet")["prediction"] for n in ("plain", "drafted")
    ]
    assert predictions[0].to_list() == predictions[1].to_list()
    assert plain["metrics"] == drafted["metrics"]
    # the target of both jobs and the draft: the attention that reads a static cache's keys
    # and values once a decode step, compiled or not (model.attention)
    assert attentions == [LOWER_RIGHT_SDPA] * 3


def test_config_draft_names_another_entry_and_jobs_get_its_path():
    models = {
        "big": {"path": "org/Carbon-3B", "draft_model": "small"},
        "small": {"path": "org/Carbon-500M", "revision": "a" * 40},
    }
    task = {"kind": "sequence_recovery", "path": "t.tsv"}
    run = RunConfig.from_dict({"models": models, "tasks": {"t": task}})
    resolved = run.draft_settings(run.models["big"])
    assert (resolved.draft_model, resolved.draft_revision) == ("org/Carbon-500M", "a" * 40)
    assert run.draft_settings(run.models["small"]) == run.models["small"]
    jobs = Jobs(run)
    settings = json.loads(
        shlex.split(jobs.task_settings(SimpleNamespace(task="t", model="big")))[0]
    )
    assert settings["draft_model"] == "org/Carbon-500M"
    with pytest.raises(ConfigError, match=r"models.big.draft_model: 'tiny' is not another model"):
        RunConfig.from_dict(
            {
                "models": {**models, "big": {"path": "x", "draft_model": "tiny"}},
                "tasks": {"t": task},
            }
        )
    with pytest.raises(ConfigError, match="not another model entry"):
        RunConfig.from_dict(
            {"models": {"m": {"path": "x", "draft_model": "m"}}, "tasks": {"t": task}}
        )
    twin = {"m": {"path": "x", "draft_model": "m2"}, "m2": {"path": "x"}}
    with pytest.raises(ConfigError, match="models.m.draft_model: 'm2' is the same model"):
        RunConfig.from_dict({"models": twin, "tasks": {"t": task}})


def test_counting_hooks_are_removed_after_generation(loaded, one_layer_draft):
    draft = Draft(load_model(ModelSettings(str(one_layer_draft), trust_remote_code=True)), tokens=2)
    settings = RecoverySettings(new_tokens=6)
    generate_continuations(loaded, _prompts(1, 60), settings, 1, draft=draft)
    calls = dict(draft.calls)
    with torch.inference_mode():
        loaded.model(input_ids=torch.ones(1, 3, dtype=torch.long))
    assert draft.calls == calls


def test_vllm_gets_the_draft_and_its_counters_make_the_acceptance():
    spec = ModelSettings(
        "org/Carbon-3B",
        draft_model="org/Carbon-500M",
        draft_revision="b" * 40,
        num_speculative_tokens=3,
    )
    arguments = engine_arguments(spec, None, 0)
    assert arguments["speculative_config"] == {
        "method": "draft_model",
        "model": "org/Carbon-500M",
        "revision": "b" * 40,
        "num_speculative_tokens": 3,
    }
    assert arguments["disable_log_stats"] is False
    assert "speculative_config" not in engine_arguments(ModelSettings("org/Carbon-3B"), None, 0)
    counters = [
        SimpleNamespace(name=f"vllm:spec_decode_num_{n}", value=v)
        for n, v in (("drafts", 10), ("draft_tokens", 30), ("accepted_tokens", 12))
    ]
    counters.append(SimpleNamespace(name="vllm:num_requests_running", value=1))
    record = speculative_record(counters, 3)
    assert record == {
        "speculative_tokens": 3,
        "drafts": 10,
        "draft_tokens": 30,
        "accepted_tokens": 12,
        "acceptance_rate": 0.4,
    }
