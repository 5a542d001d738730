"""`BgzfWriter`: BGZF as htslib writes it (the same bytes as pysam's BGZFile for the same text,
whatever the writes' sizes and the threads), read back by gzip, htslib and tabix; a block
deflate cannot shrink is stored."""

from __future__ import annotations

import gzip
import random

import pysam
import pytest
from pysam.libcbgzf import BGZFile

from carbon_vep.bgzf import BLOCK_TEXT, EOF_BLOCK, BgzfWriter, compress_block


def _table_text(n: int) -> bytes:
    rng = random.Random(7)
    return "".join(f"chr1\t{i}\tA\tC\t{rng.gauss(0, 1):.6g}\n" for i in range(1, n + 1)).encode()


def _pieces(text: bytes, rng: random.Random):
    """`text` cut at random sizes: single bytes, across block ends, several blocks at once."""
    start = 0
    while start < len(text):
        size = rng.choice([1, 7, BLOCK_TEXT - 1, BLOCK_TEXT, BLOCK_TEXT + 3, 3 * BLOCK_TEXT + 11])
        yield text[start : start + size]
        start += size


@pytest.mark.parametrize("threads", [1, 3])
def test_bgzf_is_htslibs_and_indexes(tmp_path, threads):
    text = _table_text(40_000)  # ~1 MB: 17 blocks
    ours, theirs = tmp_path / "ours.tsv.gz", tmp_path / "theirs.tsv.gz"
    with BgzfWriter(ours, threads=threads) as handle:
        for piece in _pieces(text, random.Random(threads)):
            handle.write(piece)
    with BGZFile(str(theirs), "wb") as handle:
        handle.write(text)
    assert ours.read_bytes() == theirs.read_bytes()
    assert ours.read_bytes().endswith(EOF_BLOCK)
    with gzip.open(ours, "rb") as back:
        assert back.read() == text
    pysam.tabix_index(str(ours), seq_col=0, start_col=1, end_col=1, force=True, keep_original=True)
    with pysam.TabixFile(str(ours)) as table:
        assert [line.split("\t")[1] for line in table.fetch("chr1", 29_998, 30_001)] == [
            "29999",
            "30000",
            "30001",
        ]


def test_a_block_deflate_cannot_shrink_is_stored(tmp_path):
    noise = random.Random(3).randbytes(BLOCK_TEXT)
    block = compress_block(noise)
    assert len(block) <= 0x10000
    path = tmp_path / "noise.gz"
    with BgzfWriter(path, threads=2) as handle:
        handle.write(noise + b"tail")
    with gzip.open(path, "rb") as back:
        assert back.read() == noise + b"tail"


def test_an_empty_file_is_the_eof_block(tmp_path):
    with BgzfWriter(tmp_path / "empty.gz") as _:
        pass
    assert (tmp_path / "empty.gz").read_bytes() == EOF_BLOCK
