"""Hybrid text / DNA 6-mer tokenizer mimicking HuggingFaceBio/Carbon's ``HybridDNATokenizer``.

Shipped as remote code next to a demo checkpoint (``auto_map`` in ``tokenizer_config.json``), so it
imports only the standard library and ``transformers``.

Layout: ids ``0 .. dna_start_id - 1`` are a small synthetic stand-in for Qwen3's text
vocabulary; then ``<dna>``, ``</dna>``, ``<oov>``, the ``4**k`` k-mers in
``itertools.product("ATCG")`` order and ``<unused_i>`` padding. Text after ``<dna>`` (up to
``</dna>`` or the end of the string) is stripped, upper-cased and cut into non-overlapping k-mers,
the last one right-padded with ``A``; a chunk with anything but ``ACGT`` becomes ``<oov>``. Other
text is matched greedily against the text strings; a character outside the text vocabulary
becomes ``unk_token`` (``<|endoftext|>``, which is also the eos and pad token).
No BOS/EOS is ever added.

Like Carbon, ``get_vocab()`` lets a text id win when a string is in both blocks (``"CCCCCC"``),
while ``convert_tokens_to_ids`` and ``dna_token_to_id`` give the DNA-block id.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import string
from typing import Any

from transformers import PreTrainedTokenizer

CONFIG_NAME = "dna_config.json"
DNA_OPEN, DNA_CLOSE, DNA_OOV = "<dna>", "</dna>", "<oov>"
TEXT_EOS = "<|endoftext|>"
DEFAULT_CONFIG: dict[str, Any] = {
    "k": 6,
    "alphabet": "ATCG",
    "dna_start_id": 151_669,
    "vocab_size": 155_776,
}
_TAG_RE = re.compile(r"<dna>|</dna>")
_TEXT_RE = re.compile(r"CCCCCC|[ACGT]{1,3}|.", re.DOTALL)


def text_vocabulary(size: int) -> list[str]:
    """The synthetic text block: ACGT strings of length 1-3, "CCCCCC", ASCII, eos, fillers."""
    tokens = ["".join(p) for n in (1, 2, 3) for p in itertools.product("ACGT", repeat=n)]
    tokens.append("CCCCCC")
    seen = set(tokens)
    for char in string.printable:
        if (char == " " or char not in string.whitespace) and char not in seen:
            tokens.append(char)
            seen.add(char)
    tokens.append(TEXT_EOS)
    tokens.extend(f"<|text_{i}|>" for i in range(len(tokens), size))
    return tokens


def load_dna_config(path: str | None) -> dict[str, Any]:
    """Read and check ``dna_config.json``; the Carbon layout when ``path`` is None."""
    config = dict(DEFAULT_CONFIG)
    if path is not None:
        with open(path, encoding="utf-8") as handle:
            config.update(json.load(handle))
    if config.get("first_kmer_id", config["dna_start_id"] + 3) != config["dna_start_id"] + 3:
        raise ValueError("dna_config.json: first_kmer_id must be dna_start_id + 3")
    if config["vocab_size"] < config["dna_start_id"] + 3 + len(config["alphabet"]) ** config["k"]:
        raise ValueError("dna_config.json: vocab_size too small for the DNA block")
    return config


class HybridDNATokenizer(PreTrainedTokenizer):
    """Carbon-style tokenizer: text tokens outside ``<dna>`` tags, fixed k-mers inside."""

    vocab_files_names = {"dna_config_file": CONFIG_NAME}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(
        self,
        dna_config_file: str | None = None,
        eos_token: str = TEXT_EOS,
        pad_token: str = TEXT_EOS,
        unk_token: str = TEXT_EOS,
        **kwargs: Any,
    ) -> None:
        config = load_dna_config(dna_config_file)
        self.k: int = int(config["k"])
        self.alphabet: str = config["alphabet"]
        self.dna_start_id: int = int(config["dna_start_id"])
        self.first_kmer_id: int = self.dna_start_id + 3
        self._build_vocab(int(config["vocab_size"]))
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        super().__init__(eos_token=eos_token, pad_token=pad_token, unk_token=unk_token, **kwargs)

    def _build_vocab(self, vocab_size: int) -> None:
        self.kmers = ["".join(p) for p in itertools.product(self.alphabet, repeat=self.k)]
        self._kmer_set = frozenset(self.kmers)
        self.dna_special_tokens = [DNA_OPEN, DNA_CLOSE, DNA_OOV]
        dna_tokens = self.dna_special_tokens + self.kmers
        n_unused = vocab_size - self.dna_start_id - len(dna_tokens)
        dna_tokens += [f"<unused_{i}>" for i in range(n_unused)]
        self._id_to_token = text_vocabulary(self.dna_start_id) + dna_tokens
        self.dna_token_to_id = {t: self.dna_start_id + i for i, t in enumerate(dna_tokens)}
        self.dna_id_to_token = {i: t for t, i in self.dna_token_to_id.items()}
        self._text_vocab = {t: i for i, t in enumerate(self._id_to_token[: self.dna_start_id])}
        self._vocab = {**self.dna_token_to_id, **self._text_vocab}  # text ids win
        self.dna_begin_token_id = self.dna_token_to_id[DNA_OPEN]
        self.dna_end_token_id = self.dna_token_to_id[DNA_CLOSE]
        self.oov_token_id = self.dna_token_to_id[DNA_OOV]

    @property
    def vocab_size(self) -> int:
        return len(self._id_to_token)

    def get_vocab(self) -> dict[str, int]:
        vocab = dict(self._vocab)
        vocab.update(getattr(self, "_added_tokens_encoder", {}))
        return vocab

    def _update_total_vocab_size(self) -> None:
        # len(get_vocab()) undercounts: "CCCCCC" is one key for two ids.
        added = (i + 1 for i in self._added_tokens_decoder)
        self.total_vocab_size = max([self.vocab_size, *added])

    # ---- tokenisation -------------------------------------------------------------------------

    def _tokenize(self, text: str, **kwargs: Any) -> list[str]:
        """Text-mode pieces: greedy longest match, one character otherwise."""
        return _TEXT_RE.findall(text)

    def _kmer_tokens(self, sequence: str) -> list[str]:
        sequence = sequence.strip().upper()
        chunks = [sequence[i : i + self.k] for i in range(0, len(sequence), self.k)]
        if chunks:
            chunks[-1] = chunks[-1].ljust(self.k, "A")
        return [c if c in self._kmer_set else DNA_OOV for c in chunks]

    def _text_id(self, token: str) -> int:
        """Text-mode id: added tokens, then the text block, then ``unk_token``."""
        for table in (self._added_tokens_encoder, self._text_vocab):
            if token in table:
                return table[token]
        return self._added_tokens_encoder.get(str(self.unk_token), self._text_vocab[TEXT_EOS])

    def _segment(self, text: str, in_dna: bool, **kwargs: Any) -> list[tuple[str, int]]:
        if in_dna:
            return [(t, self.dna_token_to_id[t]) for t in self._kmer_tokens(text)]
        pieces = super().tokenize(text, **kwargs) if text else []
        return [(t, self._text_id(t)) for t in pieces]

    def _encode_pairs(self, text: str, **kwargs: Any) -> list[tuple[str, int]]:
        """(token, id) pairs for ``text``; the single source of truth for encoding."""
        pairs: list[tuple[str, int]] = []
        in_dna, pos = False, 0
        for match in _TAG_RE.finditer(text):
            pairs += self._segment(text[pos : match.start()], in_dna, **kwargs)
            pairs.append((match.group(), self.dna_token_to_id[match.group()]))
            in_dna, pos = match.group() == DNA_OPEN, match.end()
        return pairs + self._segment(text[pos:], in_dna, **kwargs)

    def tokenize(self, text: str, **kwargs: Any) -> list[str]:
        return [token for token, _ in self._encode_pairs(text, **kwargs)]

    def _as_ids(self, text: Any, **kwargs: Any) -> Any:
        if isinstance(text, str) and text:
            return [i for _, i in self._encode_pairs(text, **kwargs)] or text
        return text

    def _encode_plus(self, text: Any, text_pair: Any = None, **kwargs: Any) -> Any:
        # Encode strings to ids here: token strings alone are ambiguous ("CCCCCC").
        opts = {k: kwargs[k] for k in ("split_special_tokens",) if k in kwargs}
        return super()._encode_plus(
            self._as_ids(text, **opts), self._as_ids(text_pair, **opts), **kwargs
        )

    def _convert_token_to_id(self, token: str) -> int:
        # Like Carbon: a string in both blocks ("CCCCCC") maps to its DNA id here.
        if token in self.dna_token_to_id:
            return self.dna_token_to_id[token]
        return self._text_id(token)

    def _convert_id_to_token(self, index: int) -> str:
        if not 0 <= index < len(self._id_to_token):
            raise ValueError(f"token id {index} outside the vocabulary")
        return self._id_to_token[index]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return "".join(tokens)

    # ---- saving -------------------------------------------------------------------------------

    def dna_config(self) -> dict[str, Any]:
        """The content of ``dna_config.json``."""
        return {
            "k": self.k,
            "alphabet": self.alphabet,
            "dna_start_id": self.dna_start_id,
            "first_kmer_id": self.first_kmer_id,
            "dna_tags": {t: self.dna_token_to_id[t] for t in self.dna_special_tokens},
            "vocab_size": self.vocab_size,
        }

    def save_vocabulary(
        self, save_directory: str, filename_prefix: str | None = None
    ) -> tuple[str, ...]:
        prefix = f"{filename_prefix}-" if filename_prefix else ""
        path = os.path.join(save_directory, prefix + CONFIG_NAME)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(self.dna_config(), handle, indent=2)
            handle.write("\n")
        return (path,)
