"""The demo Carbon stand-in loads with stock Auto* classes and tokenises like Carbon."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import huggingface_hub.constants
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from carbon_vep.model import demo
from carbon_vep.model.demo import build_demo_model

VOCAB_SIZE = 155_776
DNA_START = 151_669
FIRST_KMER = DNA_START + 3
BASE_INDEX = {"A": 0, "T": 1, "C": 2, "G": 3}


@pytest.fixture(scope="module", autouse=True)
def offline() -> Iterator[None]:
    """Force Hub offline mode, even if huggingface_hub was imported before."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
        yield


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_model(tmp_path_factory.mktemp("demo") / "carbon_demo")


@pytest.fixture(scope="module")
def tok(model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)


@pytest.fixture(scope="module")
def model(model_dir: Path) -> Any:
    return AutoModelForCausalLM.from_pretrained(model_dir)


def ids(tok: Any, text: str) -> list[int]:
    return tok(text, add_special_tokens=False).input_ids


def kmer_id(kmer: str) -> int:
    return FIRST_KMER + sum(BASE_INDEX[b] * 4 ** (5 - j) for j, b in enumerate(kmer))


# ---- directory layout and loading ----------------------------------------------------------


def test_directory_files(model_dir: Path) -> None:
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert config["auto_map"] == {
        "AutoTokenizer": ["tokenization_hybrid_dna.HybridDNATokenizer", None]
    }
    assert config["tokenizer_class"] == "HybridDNATokenizer"
    assert (model_dir / "tokenization_hybrid_dna.py").is_file()
    assert json.loads((model_dir / "dna_config.json").read_text()) == {
        "k": 6,
        "alphabet": "ATCG",
        "dna_start_id": DNA_START,
        "first_kmer_id": FIRST_KMER,
        "dna_tags": {"<dna>": DNA_START, "</dna>": DNA_START + 1, "<oov>": DNA_START + 2},
        "vocab_size": VOCAB_SIZE,
    }
    assert not list(model_dir.parent.glob(".carbon_demo.*")), "staging dir left behind"


def test_tokenizer_is_remote_code(tok: Any) -> None:
    assert type(tok).__name__ == "HybridDNATokenizer"
    assert type(tok).__module__.startswith("transformers_modules.")
    assert len(tok) == VOCAB_SIZE
    assert tok.vocab_size == VOCAB_SIZE
    assert (tok.k, tok.dna_start_id, tok.first_kmer_id) == (6, DNA_START, FIRST_KMER)
    assert tok.oov_token_id == DNA_START + 2
    assert tok.pad_token == tok.eos_token == "<|endoftext|>"
    assert tok.pad_token_id == tok.get_vocab()["<|endoftext|>"] < DNA_START


def test_model_shapes(model: Any, tok: Any) -> None:
    assert model.config.vocab_size == VOCAB_SIZE
    assert model.get_output_embeddings().weight.shape[0] == VOCAB_SIZE
    assert model.get_input_embeddings().weight.shape[0] == VOCAB_SIZE
    assert model.dtype == torch.float32
    assert model.config.pad_token_id == tok.pad_token_id
    assert model.generation_config.pad_token_id == tok.pad_token_id


def test_the_demo_model_is_built_at_the_shape_the_estimates_price(model_dir: Path) -> None:
    """config.gpus.DEMO_SHAPE is the one definition: the built model's config.json has it (the
    estimates then read the same shape from the folder as they priced before the build), and
    the positions the scan's plan checks its tiles against before the build
    (DEMO_MAX_POSITIONS)."""
    from carbon_vep.config.gpus import CARBON_VOCAB, DEMO_MAX_POSITIONS, DEMO_MODEL, DEMO_SHAPE
    from carbon_vep.config.stages import ModelSettings
    from carbon_vep.estimate.costs import shape_of

    config = json.loads((model_dir / "config.json").read_text())
    assert {key: config[key] for key in DEMO_SHAPE} == DEMO_SHAPE
    assert config["max_position_embeddings"] == DEMO_MAX_POSITIONS
    built = shape_of(ModelSettings(path=str(model_dir)))
    unbuilt = shape_of(ModelSettings(path=str(model_dir / "not_yet"), build_demo=True))
    assert built.name == unbuilt.name == DEMO_MODEL
    assert built.dims == unbuilt.dims == {**DEMO_SHAPE, "vocab_size": CARBON_VOCAB}


def test_forward_on_dna_prompt(model: Any, tok: Any) -> None:
    enc = tok("<dna>ACGTACGTTAGCCGATAAGT", return_tensors="pt")
    assert enc.input_ids.shape == (1, 5)
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape == (1, 5, VOCAB_SIZE)
    assert torch.isfinite(logits).all()


# ---- 6-mer ids -----------------------------------------------------------------------------


def test_kmer_id_order(tok: Any) -> None:
    assert tok.dna_token_to_id["AAAAAA"] == FIRST_KMER
    assert tok.dna_token_to_id["AAAAAT"] == FIRST_KMER + 1
    assert tok.dna_token_to_id["AAAAAC"] == FIRST_KMER + 2
    assert tok.dna_token_to_id["TAAAAA"] == FIRST_KMER + 4**5
    assert tok.dna_token_to_id["GGGGGG"] == FIRST_KMER + 4**6 - 1
    assert ids(tok, "<dna>TAAAAA") == [DNA_START, FIRST_KMER + 4**5]


def test_kmer_id_formula_random(tok: Any) -> None:
    rng = random.Random(0)
    kmers = ["".join(rng.choice("ACGT") for _ in range(6)) for _ in range(300)]
    assert [tok.dna_token_to_id[k] for k in kmers] == [kmer_id(k) for k in kmers]
    assert ids(tok, "<dna>" + "".join(kmers)) == [DNA_START] + [kmer_id(k) for k in kmers]


# ---- tokenisation rules --------------------------------------------------------------------


def test_spec_example(tok: Any) -> None:
    expected = [DNA_START, kmer_id("ACGTAC"), kmer_id("GTACGG")]
    assert ids(tok, "<dna>ACGTACgtacgg") == expected
    assert tok("<dna>ACGTACgtacgg").input_ids == expected  # no BOS/EOS added


def test_lowercase_equals_uppercase(tok: Any) -> None:
    seq = "ACGTTGCAAGGCTTACGA"
    assert ids(tok, "<dna>" + seq.lower()) == ids(tok, "<dna>" + seq)


def test_non_acgt_kmer_is_oov(tok: Any) -> None:
    assert ids(tok, "<dna>ACGTNA") == [DNA_START, tok.oov_token_id]
    assert ids(tok, "<dna>acgtnaACGTAC") == [DNA_START, tok.oov_token_id, kmer_id("ACGTAC")]


def test_trailing_partial_chunk_padded_with_a(tok: Any) -> None:
    assert ids(tok, "<dna>ACGTACGG") == [DNA_START, kmer_id("ACGTAC"), kmer_id("GGAAAA")]
    assert ids(tok, "<dna>c") == [DNA_START, kmer_id("CAAAAA")]


def test_text_outside_tags_not_kmer_tokenised(tok: Any) -> None:
    vocab = tok.get_vocab()
    text_ids = ids(tok, "ACGTAC")
    assert text_ids == [vocab["ACG"], vocab["TAC"]]
    assert all(i < DNA_START for i in text_ids)
    assert ids(tok, "hi ") == [vocab["h"], vocab["i"], vocab[" "]]


def test_closing_tag_ends_dna_mode(tok: Any) -> None:
    vocab = tok.get_vocab()
    assert ids(tok, "x<dna>ACGTAC</dna>ACGTAC") == [
        vocab["x"],
        DNA_START,
        kmer_id("ACGTAC"),
        DNA_START + 1,
        vocab["ACG"],
        vocab["TAC"],
    ]
    assert ids(tok, "<dna></dna>") == [DNA_START, DNA_START + 1]


def test_cccccc_quirk(tok: Any) -> None:
    text_id = tok.get_vocab()["CCCCCC"]
    assert text_id < DNA_START
    assert tok.dna_token_to_id["CCCCCC"] == kmer_id("CCCCCC") != text_id
    assert ids(tok, "CCCCCC") == [text_id]
    assert ids(tok, "<dna>CCCCCC") == [DNA_START, kmer_id("CCCCCC")]


def test_batch_padding_and_decode(tok: Any) -> None:
    batch = tok(["<dna>ACGTAC", "<dna>ACGTACGGA"], padding=True, return_tensors="pt")
    assert batch.input_ids.tolist() == [
        [DNA_START, kmer_id("ACGTAC"), tok.pad_token_id],
        [DNA_START, kmer_id("ACGTAC"), kmer_id("GGAAAA")],
    ]
    assert batch.attention_mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    text = "hi <dna>ACGTACGG</dna>!"
    assert tok.decode(ids(tok, text)) == "hi <dna>ACGTACGGAAAA</dna>!"


def test_resave_roundtrip(tok: Any, tmp_path: Path) -> None:
    tok.save_pretrained(tmp_path)
    again = AutoTokenizer.from_pretrained(tmp_path, trust_remote_code=True)
    text = "x <dna>ACGTNAccgtacCCCCCCA</dna> CCCCCC"
    assert ids(again, text) == ids(tok, text)
    assert len(again) == VOCAB_SIZE


# ---- build behaviour -----------------------------------------------------------------------


def test_second_build_is_a_no_op(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stamp = (model_dir / "model.safetensors").stat().st_mtime_ns

    def fail(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("rebuilt")

    monkeypatch.setattr(demo, "make_model", fail)
    assert build_demo_model(model_dir) == model_dir
    assert (model_dir / "model.safetensors").stat().st_mtime_ns == stamp


def test_same_seed_same_weights(model_dir: Path, tmp_path: Path) -> None:
    reference = load_file(model_dir / "model.safetensors")
    same = load_file(build_demo_model(tmp_path / "same") / "model.safetensors")
    other = load_file(build_demo_model(tmp_path / "other", seed=1) / "model.safetensors")
    assert reference.keys() == same.keys()
    assert all(torch.equal(reference[k], same[k]) for k in reference)
    assert not torch.equal(
        reference["model.embed_tokens.weight"], other["model.embed_tokens.weight"]
    )


def test_failed_build_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("killed")

    monkeypatch.setattr(demo.HybridDNATokenizer, "save_pretrained", crash)
    with pytest.raises(RuntimeError, match="killed"):
        build_demo_model(tmp_path / "m")
    assert list(tmp_path.iterdir()) == []


def test_incomplete_dir_is_rebuilt(tmp_path: Path) -> None:
    out = tmp_path / "m"
    out.mkdir()
    (out / "config.json").write_text("{}")
    build_demo_model(out)
    assert demo.is_complete(out)
    assert json.loads((out / "config.json").read_text())["vocab_size"] == VOCAB_SIZE
