"""A user's own checkpoint is checked as it loads, before any variant is scored: weights that
do not fill the architecture its config.json names (transformers would initialise the rest at
random and only warn), a folder without weights or of no causal LM, and a vocabulary without
every k-mer, each refused with the model named and the problem said."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file
from support.kmer_model import build_kmer_model, kmer_strings

from carbon_vep.config.stages import ModelSettings
from carbon_vep.errors import InputError, TokenizerMismatchError
from carbon_vep.model.loading import load_model

WEIGHTS = "model.safetensors"


@pytest.fixture(scope="module")
def kmer6(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_kmer_model(tmp_path_factory.mktemp("kmer6") / "model", 6)


def _copy(model: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(model, tmp_path / "mine"))


def _edit_config(model: Path, **changes) -> None:
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config | changes))


def _refusal(model: Path, error: type[Exception] = InputError) -> str:
    with pytest.raises(error) as err:
        load_model(ModelSettings(str(model)))
    message = str(err.value)
    assert message.startswith(f"{model}: "), message  # names the model
    return message


def test_the_checkpoint_as_saved_loads(kmer6):
    assert load_model(ModelSettings(str(kmer6))).vocab.k == 6


def test_a_weights_file_cut_short_is_refused(kmer6, tmp_path):
    model = _copy(kmer6, tmp_path)
    weights = load_file(model / WEIGHTS)
    kept = {name: value for name, value in weights.items() if ".mlp." not in name}
    save_file(kept, model / WEIGHTS, metadata={"format": "pt"})
    message = _refusal(model)
    assert "(llama): 3 weight(s) missing from the checkpoint" in message
    assert "model.layers.0.mlp.down_proj.weight" in message and "would be random" in message


def test_a_config_of_another_architecture_is_refused(kmer6, tmp_path):
    model = _copy(kmer6, tmp_path)  # GPT-2's config over Llama's weights: none of them fits
    _edit_config(model, model_type="gpt2", architectures=["GPT2LMHeadModel"], n_embd=32)
    message = _refusal(model)
    assert "(gpt2): " in message and "missing from the checkpoint" in message
    assert (
        "11 checkpoint weight(s) the model has no place for, e.g. ['model.embed_tokens" in message
    )


def test_weights_of_other_shapes_are_refused(kmer6, tmp_path):
    model = _copy(kmer6, tmp_path)
    _edit_config(model, intermediate_size=48)
    message = _refusal(model)
    assert "3 of another shape" in message and "(64, 32) in the checkpoint, (48, 32)" in message


def test_a_folder_without_weights_is_named(kmer6, tmp_path):
    model = _copy(kmer6, tmp_path)
    (model / WEIGHTS).unlink()
    assert "cannot load the model: Error no file named model.safetensors" in _refusal(model)


def test_a_config_of_no_causal_lm_is_named(kmer6, tmp_path):
    model = _copy(kmer6, tmp_path)
    _edit_config(model, model_type="t5", architectures=["T5ForConditionalGeneration"])
    assert "cannot load the model: Unrecognized configuration class" in _refusal(model)


def test_a_vocabulary_without_every_kmer_names_the_missing_ones(tmp_path):
    lacking = ("GGGGGG", "ACGTAC", "TTTTTT")
    model = build_kmer_model(
        tmp_path / "lacking", 6, [s for s in kmer_strings(6) if s not in lacking]
    )
    message = _refusal(model, TokenizerMismatchError)
    assert "3 of the 4,096 6-mers are missing, e.g. ['ACGTAC', 'TTTTTT', 'GGGGGG']" in message


def test_a_character_level_tokenizer_is_named_as_such(tmp_path):
    model = build_kmer_model(tmp_path / "chars", 1)  # one base a token
    assert "no pure-ACGT token of more than one base" in _refusal(model, TokenizerMismatchError)
