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


def test_a_shorter_kmer_block_first_is_named_with_the_fix(tmp_path):
    """2-mers before the 6-mers: the adapter's scan takes the first whole block (2-mers), the
    tokenizer cuts DNA into 6-mers. The message says so, and the fix it names loads."""
    model = build_kmer_model(tmp_path / "k2k6", 6, kmer_strings(2) + kmer_strings(6))
    message = _refusal(model, TokenizerMismatchError)
    first_6mer = 32 + 16  # after the 32 specials and the 16 2-mers
    assert "the tokenizer cuts DNA into 6-base pieces" in message
    assert "the k-mer block (ids 32-47, the first run of 4**k pure-ACGT tokens" in message
    assert "holds 2-mers" in message and "came back as 6 pieces of 6 (x5), 2 bases" in message
    assert f'{{"k": 6, "first_kmer_id": {first_6mer}}}' in message
    (model / "dna_config.json").write_text(json.dumps({"k": 6, "first_kmer_id": first_6mer}))
    vocab = load_model(ModelSettings(str(model))).vocab
    assert vocab.k == 6 and vocab.kmer_ids[0] == first_6mer


class _AddsBos:
    """A tokenizer that puts its BOS before the text even without special tokens."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __len__(self):
        return len(self._tokenizer)

    def __call__(self, text, **kwargs):
        encoded = self._tokenizer(text, **kwargs)
        return {"input_ids": [self._tokenizer.bos_token_id, *encoded["input_ids"]]}


def test_a_tokenizer_adding_its_own_bos_is_named(kmer6):
    from transformers import AutoTokenizer

    from carbon_vep.model.tokens import dna_vocab

    with pytest.raises(TokenizerMismatchError) as err:
        dna_vocab(_AddsBos(AutoTokenizer.from_pretrained(kmer6)))
    assert str(err.value).startswith(
        "the tokenizer does not start '<s>' + DNA with the prefix alone: its first tokens are "
        "['<s>', '<s>', 'AAAAAA']"
    )
