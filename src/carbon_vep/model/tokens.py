"""The one tokenizer adapter: finds the k-mer block and the DNA prefix from the tokenizer itself.

Internal k-mer index i is the i-th string of itertools.product("ATCG", repeat=k), so base codes
are A=0, T=1, C=2, G=3 and a distribution over the block reshapes to [4] * k for FNS marginals.
The tokenizer's own ids for those strings are read from the tokenizer (`dna_token_to_id`,
`dna_config.json`, or a scan of its vocabulary) and verified by a self-check at load time.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from carbon_vep.errors import TokenizerMismatchError

BASES = "ATCG"
_CODE = np.full(256, -1, dtype=np.int64)
for _i, _b in enumerate(BASES):
    _CODE[ord(_b)] = _i
    _CODE[ord(_b.lower())] = _i


def non_acgt_count(seq: str) -> int:
    """Bases other than upper-case A, C, G, T: they reach the model as `<oov>` tokens."""
    return len(seq) - sum(seq.count(b) for b in BASES)


def base_codes(seq: str, k: int) -> np.ndarray:
    """ATCG codes of `seq` as [len/k, k] (non-ACGT = -1); len must be a multiple of k."""
    return _CODE[np.frombuffer(seq.encode("ascii"), dtype=np.uint8)].reshape(-1, k)


def kmer_strings(k: int) -> list[str]:
    return ["".join(p) for p in itertools.product(BASES, repeat=k)]


@dataclass(frozen=True)
class DnaVocab:
    """What scoring needs to know about a tokenizer, independent of the model's name."""

    k: int
    prefix_id: int
    prefix_token: str
    kmer_ids: np.ndarray  # [4**k] tokenizer ids in internal ATCG order
    oov_id: int | None
    pad_id: int
    vocab_size: int
    acgt_string_ids: dict[str, list[int]] = field(default_factory=dict)  # first base -> ids

    def encode(self, seq: str, lead: Sequence[int] = ()) -> np.ndarray:
        """`lead` ids (e.g. a species tag), prefix, k-mer ids of `seq` (length must be a multiple
        of k; N/IUPAC -> <oov>)."""
        if len(seq) % self.k:
            raise ValueError(f"sequence length {len(seq)} is not a multiple of k={self.k}")
        codes = base_codes(seq, self.k)
        weights = 4 ** np.arange(self.k - 1, -1, -1, dtype=np.int64)
        index = (np.clip(codes, 0, 3) * weights).sum(axis=1)
        ids = self.kmer_ids[index]
        bad = (codes < 0).any(axis=1)
        if bad.any():
            if self.oov_id is None:
                raise ValueError("non-ACGT base in a window and the tokenizer has no <oov> token")
            ids = np.where(bad, self.oov_id, ids)
        return np.concatenate([np.asarray(lead, np.int64), [self.prefix_id], ids]).astype(np.int64)


def _read_dna_config(tokenizer: Any) -> dict:
    """dna_config.json next to the tokenizer (local directory or Hub cache), if any."""
    source = getattr(tokenizer, "name_or_path", "") or ""
    local = Path(source) / "dna_config.json"
    if local.is_file():
        return json.loads(local.read_text())
    try:
        from transformers.utils import cached_file

        path = cached_file(source, "dna_config.json", _raise_exceptions_for_missing_entries=False)
    except (OSError, ValueError):
        return {}
    return json.loads(Path(path).read_text()) if path else {}


def suppressed_token_ids(tokenizer: Any) -> list[int]:
    """The ids the published decoder never emits: special tokens and DNA tags."""
    ids = set(tokenizer.all_special_ids)
    for attribute in ("special_tokens", "dna_special_tokens"):
        names = getattr(tokenizer, attribute, None)
        if names:
            ids.update(int(i) for i in tokenizer.convert_tokens_to_ids(list(names)))
    return sorted(i for i in ids if i is not None and i >= 0)


def dna_block_ids(tokenizer: Any, vocab: DnaVocab) -> np.ndarray | None:
    """The ids generation may emit under the published DNA restriction: the 6-mer block
    [start, start + 4**k) read from the model's dna_config.json (start = `first_kmer_id`, or
    `dna_start_id` + its three DNA tags); None when the model has no dna_config.json (no
    restriction, as published). The block must be the k-mers the adapter found."""
    config = _read_dna_config(tokenizer)
    if not config:
        return None
    k = int(config.get("k", vocab.k))
    alphabet = config.get("alphabet", BASES)
    if "first_kmer_id" in config:
        start = int(config["first_kmer_id"])
    elif "dna_start_id" in config:
        start = int(config["dna_start_id"]) + (len(config.get("dna_tags") or ()) or 3)
    else:
        raise TokenizerMismatchError("dna_config.json names neither first_kmer_id nor dna_start_id")
    block = np.arange(start, start + len(alphabet) ** k, dtype=np.int64)
    if k != vocab.k or not np.array_equal(np.sort(vocab.kmer_ids), block):
        raise TokenizerMismatchError(
            f"dna_config.json's 6-mer block [{start}, {start + len(alphabet) ** k}) is not the "
            "tokenizer's k-mer ids: the generation restriction would emit other tokens"
        )
    return block


def _scan_kmer_block(tokenizer: Any) -> tuple[int, dict[str, int]]:
    """Find the first contiguous run of 4**k pure-ACGT tokens of one length k (the k-mer
    block)."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    run: list[tuple[int, str]] = []
    for idx, tok in enumerate([*tokens, None]):
        if tok and set(tok) <= set(BASES) and (not run or len(tok) == len(run[0][1])):
            run.append((idx, tok))
            continue
        if run and len(run) == 4 ** len(run[0][1]) and len(run[0][1]) > 1:
            return len(run[0][1]), {t: i for i, t in run}
        run = [(idx, tok)] if tok and set(tok) <= set(BASES) else []
    raise TokenizerMismatchError(
        f"no contiguous block of 4**k pure-ACGT k-mer tokens in vocabulary: {_no_block(tokens)}"
    )


def _no_block(tokens: Sequence[str | None]) -> str:
    """Why a vocabulary has no k-mer block: the k-mers of its most common length (k > 1) that
    it lacks, or that it has none (a character-level or BPE tokenizer)."""
    lengths: dict[int, set[str]] = {}
    for tok in tokens:
        if tok and len(tok) > 1 and set(tok) <= set(BASES):
            lengths.setdefault(len(tok), set()).add(tok)
    if not lengths:
        return "it holds no pure-ACGT token of more than one base (a character-level tokenizer?)"
    k = max(lengths, key=lambda n: len(lengths[n]))
    missing = [s for s in kmer_strings(k) if s not in lengths[k]]
    if missing:
        return (
            f"{len(missing):,} of the {4**k:,} {k}-mers are missing, e.g. {missing[:3]}; every "
            f"{k}-mer needs its own token (the per-base marginals sum over all of them)"
        )
    return f"its {4**k:,} {k}-mers are not numbered one after another"


def _kmer_map(tokenizer: Any) -> tuple[int, dict[str, int], str]:
    """(k, {k-mer: id}, where the map came from, for the self-check's message)."""
    if hasattr(tokenizer, "dna_token_to_id"):
        mapping = dict(tokenizer.dna_token_to_id)
        k = int(getattr(tokenizer, "k", len(next(iter(mapping)))))
        kmers = {s: i for s, i in mapping.items() if len(s) == k and set(s) <= set(BASES)}
        return k, kmers, "the tokenizer's dna_token_to_id"
    config = _read_dna_config(tokenizer)
    if "first_kmer_id" in config:
        k = int(config["k"])
        order = kmer_strings(k) if config.get("alphabet", BASES) == BASES else None
        if order is None:
            raise TokenizerMismatchError(f"unsupported k-mer alphabet {config.get('alphabet')}")
        start = int(config["first_kmer_id"])
        return k, {s: start + i for i, s in enumerate(order)}, "dna_config.json's first_kmer_id"
    k, mapping = _scan_kmer_block(tokenizer)
    ids = sorted(mapping.values())
    found = f"ids {ids[0]}-{ids[-1]}, the first run of 4**k pure-ACGT tokens in its vocabulary"
    return k, mapping, found


def _prefix(tokenizer: Any) -> tuple[str, int]:
    """`<dna>` when the vocabulary has it (Carbon), else the BOS token (GENERator's `<s>`)."""
    vocab = tokenizer.get_vocab()
    if "<dna>" in vocab:
        return "<dna>", int(tokenizer.convert_tokens_to_ids("<dna>"))
    if tokenizer.bos_token is not None:
        return tokenizer.bos_token, int(tokenizer.bos_token_id)
    raise TokenizerMismatchError("tokenizer has neither a <dna> tag nor a BOS token to prefix DNA")


def dna_vocab(tokenizer: Any) -> DnaVocab:
    """Build the adapter for `tokenizer` and run the self-check (raises TokenizerMismatchError)."""
    k, mapping, source = _kmer_map(tokenizer)
    missing = [s for s in kmer_strings(k) if s not in mapping]
    if missing:
        raise TokenizerMismatchError(
            f"{len(missing)} of {4**k} {k}-mers missing, e.g. {missing[:3]}"
        )
    prefix_token, prefix_id = _prefix(tokenizer)
    vocab = tokenizer.get_vocab()
    oov = vocab.get("<oov>")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else prefix_id
    acgt: dict[str, list[int]] = {b: [] for b in BASES}
    for string, idx in vocab.items():  # get_vocab keeps one id per string, as the published code
        if string and set(string) <= set(BASES):
            acgt[string[0]].append(int(idx))
    adapter = DnaVocab(
        k=k,
        prefix_id=prefix_id,
        prefix_token=prefix_token,
        kmer_ids=np.array([mapping[s] for s in kmer_strings(k)], dtype=np.int64),
        oov_id=None if oov is None else int(oov),
        pad_id=int(pad),
        vocab_size=len(tokenizer),
        acgt_string_ids=acgt,
    )
    self_check(tokenizer, adapter, source)
    return adapter


def self_check(tokenizer: Any, adapter: DnaVocab, source: str = "") -> None:
    """Tokenize every k-mer in order through the tokenizer and compare with our encoding
    (`source`: where the k-mer map came from, for the message)."""
    probe = "".join(kmer_strings(adapter.k))
    theirs = list(tokenizer(adapter.prefix_token + probe, add_special_tokens=False)["input_ids"])
    ours = adapter.encode(probe).tolist()
    if theirs != ours:
        block = f"the k-mer block ({source})" if source else "the k-mer map"
        raise TokenizerMismatchError(_mismatch(tokenizer, adapter, theirs, ours, block))
    if adapter.oov_id is not None and adapter.oov_id in theirs:
        raise TokenizerMismatchError("clean DNA produced <oov> ids")


def _mismatch(tokenizer: Any, adapter: DnaVocab, theirs: list, ours: list, block: str) -> str:
    """What the tokenizer made of the self-check's probe (every k-mer in order after the
    prefix) against what the k-mer map expects, and what the tool needs."""
    k, prefix = adapter.k, adapter.prefix_token
    pieces = [str(t) for t in tokenizer.convert_ids_to_tokens(theirs)]
    if theirs[:1] != ours[:1] or (len(theirs) > 1 and not set(pieces[1]) <= set(BASES)):
        return (
            f"the tokenizer does not start {prefix!r} + DNA with the prefix alone: its first "
            f"tokens are {pieces[:3]} (a BOS it adds of its own, or a prefix it splits); "
            f"carbon-vep needs {prefix!r} then one token a {k}-mer"
        )
    sizes = [len(t) for t in pieces[1:]]
    if set(sizes) != {k}:
        cut = max(set(sizes), key=sizes.count)
        return (
            f"the tokenizer cuts DNA into {cut}-base pieces, while {block} holds {k}-mers: the "
            f"probe, every {k}-mer in order ({len(ours) - 1:,} tokens, {k * (len(ours) - 1):,} "
            f"bases after {prefix!r}), came back as {len(sizes):,} pieces of {_sizes(sizes)} "
            f"bases, e.g. {pieces[1:4]}. carbon-vep needs the block of the k-mers the "
            f"tokenizer cuts DNA into: every one its own token, numbered one after another"
            f"{_name_block(tokenizer, cut)}"
        )
    at = next(i for i, (a, b) in enumerate(zip(theirs, ours, strict=True)) if a != b)
    return (
        f"the tokenizer's ids are not {block}'s: {pieces[at]!r} is id {theirs[at]} in the "
        f"tokenizer, {ours[at]} in the map (wrong k-mer order)"
    )


def _sizes(sizes: list[int]) -> str:
    """Piece sizes in order, runs folded: [6, 6, 6, 2] -> '6 (x3), 2'."""
    runs = [(size, len(list(group))) for size, group in itertools.groupby(sizes)]
    shown = [f"{size} (x{n:,})" if n > 1 else str(size) for size, n in runs[:4]]
    return ", ".join(shown) + (", ..." if len(runs) > 4 else "")


def _name_block(tokenizer: Any, k: int) -> str:
    """How to point the adapter at the tokenizer's own k-mer block, where its k-mers are one
    run of ids in the adapter's order (what dna_config.json's first_kmer_id means)."""
    ids = tokenizer.convert_tokens_to_ids(kmer_strings(k))
    start = ids[0] if ids and isinstance(ids[0], int) else None
    if start is None or ids != list(range(start, start + 4**k)):
        return ""
    return (
        f"; its {k}-mers are ids {start}-{start + 4**k - 1} in order: name them in a "
        f'dna_config.json beside the tokenizer, {{"k": {k}, "first_kmer_id": {start}}}'
    )
