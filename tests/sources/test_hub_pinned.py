"""A Hub model pinned to a commit whose snapshot is cached loads from the cache alone, with
HF_HUB_OFFLINE unset (a user's `carbon-vep score` by hand on a node without network): no
request reaches the Hub, and a file missing from the snapshot fails at once, naming the cache
and the fetch. No network: every request huggingface_hub makes is recorded and refused."""

from __future__ import annotations

import os
import sys
import types
from dataclasses import replace

import httpx2
import huggingface_hub
import pytest
from huggingface_hub.utils._http import default_client_factory
from support.hub import COMMIT, REPO_ID, fake_hub_cache

from carbon_vep.config.stages import ModelSettings
from carbon_vep.model.job import load_job_model
from carbon_vep.model.vllm import VllmEngine, starts_offline
from carbon_vep.sources.hub import ModelNotCachedError, load_options, model_folder

# huggingface_hub's own best-effort telemetry (once a process, a 3 s timeout, skipped with
# HF_HUB_DISABLE_TELEMETRY): asks for no file of the model
TELEMETRY = "/api/agent-harnesses"


@pytest.fixture
def requests_made(monkeypatch):
    """Online as far as huggingface_hub knows, every request recorded and failed without
    retries (a connection error would be retried for minutes)."""
    made: list[str] = []

    def refuse(request):
        made.append(f"{request.method} {request.url}")
        raise RuntimeError(f"no network in tests: {request.url}")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    huggingface_hub.set_client_factory(
        lambda: httpx2.Client(transport=httpx2.MockTransport(refuse))
    )
    yield made
    huggingface_hub.set_client_factory(default_client_factory)


@pytest.fixture
def cached(demo_model_dir, tmp_path, monkeypatch):
    """The demo model as the cached snapshot COMMIT of REPO_ID."""
    snapshot = fake_hub_cache(tmp_path / "hf", demo_model_dir)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf/hub"))
    return snapshot


def _model_requests(made: list[str]) -> list[str]:
    return [url for url in made if not url.endswith(TELEMETRY)]


def test_a_pinned_cached_model_loads_without_asking_the_hub(cached, requests_made, monkeypatch):
    pinned = ModelSettings(REPO_ID, revision=COMMIT, trust_remote_code=True)
    assert model_folder(pinned) == (cached, True)
    assert load_options(pinned) == {"revision": COMMIT, "local_files_only": True}
    loaded = load_job_model(pinned, job=None)
    assert _model_requests(requests_made) == []
    # named by its Hub id, as offline: the same name, the same remote-code module
    assert loaded.model.config._name_or_path == REPO_ID
    assert loaded.tokenizer.name_or_path == REPO_ID
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    offline = load_job_model(pinned, job=None)
    assert type(loaded.tokenizer).__module__ == type(offline.tokenizer).__module__
    assert COMMIT in type(loaded.tokenizer).__module__  # the module cache keyed by the commit


@pytest.mark.parametrize("revision", [None, "main"])
def test_an_unpinned_revision_still_asks_the_hub(cached, requests_made, revision):
    """A branch can move: only the Hub says where it points now (HF_HUB_OFFLINE=1 says not to
    ask)."""
    assert load_options(ModelSettings(REPO_ID, revision=revision)) == {"revision": revision}


@pytest.mark.parametrize(
    ("missing", "detail"),
    [
        ("model.safetensors", "cannot load the model: "),
        ("tokenizer_config.json", "no tokenizer_config.json"),
        ("tokenization_hybrid_dna.py", "cannot load the model's tokenizer: "),
    ],
)
def test_a_file_missing_from_the_pinned_snapshot_fails_at_once_naming_the_fetch(
    cached, requests_made, tmp_path, missing, detail
):
    (cached / missing).unlink()
    with pytest.raises(ModelNotCachedError) as err:
        load_job_model(ModelSettings(REPO_ID, revision=COMMIT, trust_remote_code=True), job=None)
    message = str(err.value)
    assert message.startswith(
        f"{REPO_ID}: revision {COMMIT} is incomplete in the Hugging Face cache "
        f"{tmp_path / 'hf/hub'} ({detail}"
    )
    assert "a snapshot at a commit is read from the cache alone" in message
    assert f"carbon-vep fetch-model --model {REPO_ID} --revision {COMMIT} --out FILE" in message
    assert _model_requests(requests_made) == []


@pytest.fixture
def fake_vllm(monkeypatch) -> dict:
    """vLLM as far as VllmEngine sees it: its LLM records the arguments and whether the Hub is
    off (this process's flag, and the variable its workers would read) when it starts."""
    started: dict = {}

    class LLM:
        def __init__(self, **arguments):
            started.update(
                arguments=arguments,
                variable=os.environ.get("HF_HUB_OFFLINE"),
                flag=huggingface_hub.constants.HF_HUB_OFFLINE,
            )

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.__version__ = LLM, "fake"
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.inputs", inputs)
    engine_sets = ("HF_HUB_OFFLINE", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE")
    for name in (*engine_sets, "VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        monkeypatch.delenv(name, raising=False)  # undone after the test
    return started


def test_vllm_reads_a_pinned_cached_model_from_the_cache_alone(
    cached, requests_made, fake_vllm, demo_model_dir
):
    """vLLM takes a Hub id and a revision and has no cache-only option: a job whose every Hub
    model is read from the cache alone starts vLLM with the Hub off, for this process and the
    workers it starts, as a job run with HF_HUB_OFFLINE=1 (vLLM then reads the cached snapshot,
    the tokenizer at the same commit). A branch, or a draft on one, still asks the Hub."""
    pinned = ModelSettings(REPO_ID, revision=COMMIT, trust_remote_code=True, device="cpu")
    on_branch = replace(pinned, revision="main")
    assert starts_offline(pinned) and not starts_offline(on_branch)
    assert not starts_offline(replace(pinned, draft_model=REPO_ID, draft_revision="main"))
    assert starts_offline(replace(pinned, draft_model=str(demo_model_dir)))
    assert not starts_offline(replace(pinned, path=str(demo_model_dir), revision=None))
    VllmEngine(on_branch)
    assert fake_vllm["variable"] is None and fake_vllm["flag"] is False
    VllmEngine(pinned)
    assert fake_vllm["variable"] == "1" and fake_vllm["flag"] is True
    arguments = fake_vllm["arguments"]
    assert arguments["model"] == arguments["tokenizer"] == REPO_ID  # named as our engine names it
    assert arguments["revision"] == arguments["tokenizer_revision"] == COMMIT
    assert _model_requests(requests_made) == []
