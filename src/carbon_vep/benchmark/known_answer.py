"""A model whose right answer is known: a tiny Llama trained on a genome with a planted motif.

The synthetic genome is random sequence with one 48 bp motif planted every ~140 bp. A 1-layer
Llama with a Carbon-like hybrid tokenizer (a small text block, then `<dna>`, `</dna>`, `<oov>`
and the 4,096 6-mers in ATCG order) learns, in a few seconds on one CPU thread, that a motif
continues itself, so SNVs that break a motif must score as damaging and background SNVs not.
tests/scoring/test_known_answer.py runs the pipeline's recipes on it; the GPU check
(benchmark.gpu) compares the AUROC of bf16 and float32 runs on it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from carbon_vep.benchmark.synthetic import write_fasta
from carbon_vep.model.assets.tokenization_hybrid_dna import HybridDNATokenizer
from carbon_vep.model.tokens import dna_vocab

MOTIF_BP = 48
GENOME_BP = 20_000
MIN_LEFT_MOTIF = 12  # positives have at least this many motif bases to their left,
MIN_RIGHT_MOTIF = 6  # and this many from them to the motif's end: their 6-mer is all motif
WINDOW_BP = {"centered": 96, "fns": 96, "nexttoken": 60}


def plant_motifs(rng: random.Random) -> tuple[str, str, list[int]]:
    motif = "".join(rng.choice("ACGT") for _ in range(MOTIF_BP))
    bases = [rng.choice("ACGT") for _ in range(GENOME_BP)]
    starts, p = [], 60
    while p < GENOME_BP - 200:
        starts.append(p)
        bases[p : p + MOTIF_BP] = motif
        p += rng.randint(110, 170)
    return "".join(bases), motif, starts


def make_tokenizer(folder: Path) -> HybridDNATokenizer:
    """Carbon's layout with a 256-entry text block: 4,480 ids instead of 155,776."""
    config = folder / "dna_config.json"
    config.write_text(
        json.dumps({"k": 6, "alphabet": "ATCG", "dna_start_id": 256, "vocab_size": 4480})
    )
    HybridDNATokenizer.register_for_auto_class("AutoTokenizer")
    return HybridDNATokenizer(dna_config_file=str(config), model_max_length=8192)


def train(
    genome: str,
    tokenizer: HybridDNATokenizer,
    rng: random.Random,
    steps: int = 150,
    device: str = "cpu",
) -> LlamaForCausalLM:
    vocab = dna_vocab(tokenizer)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # deterministic, and fastest for a model this small
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = LlamaForCausalLM(config).to(device)
            optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
            for _ in range(steps):
                starts = [rng.randrange(0, len(genome) - 120) for _ in range(64)]
                ids = np.stack([vocab.encode(genome[s : s + 120]) for s in starts])
                ids = torch.as_tensor(ids, device=device)
                loss = model(input_ids=ids, labels=ids).loss
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return model.cpu().eval()


def build_world(folder: Path, steps: int = 150, device: str = "cpu") -> dict:
    """The trained model saved in `folder/model`, the genome FASTA, the motif and its starts."""
    rng = random.Random(7)
    genome, motif, starts = plant_motifs(rng)
    tokenizer = make_tokenizer(folder)
    model_dir = folder / "model"
    train(genome, tokenizer, rng, steps, device).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    fasta = write_fasta(folder / "genome.fa", {"chrS": genome})
    return {
        "model": model_dir,
        "fasta": fasta,
        "genome": genome,
        "motif": motif,
        "starts": starts,
        "folder": folder,
    }


def background_positions(starts: list[int], margin: int) -> list[int]:
    """0-based positions at least `margin` bp from every motif occurrence."""
    out = []
    for here, after in zip(starts, starts[1:], strict=False):
        lo, hi = here + MOTIF_BP + margin, after - margin
        if hi > lo:
            out.append((lo + hi) // 2)
    return out


def write_panel(world: dict) -> Path:
    """30 motif-breaking SNVs (label 1) and 30 background SNVs (label 0), as a TSV panel."""
    rng = random.Random(11)
    genome, starts = world["genome"], world["starts"]
    offsets = range(MIN_LEFT_MOTIF, MOTIF_BP - MIN_RIGHT_MOTIF + 1)
    positives = [s + rng.choice(offsets) for s in starts[2:32]]
    negatives = background_positions(starts[2:], margin=30)[:30]
    lines = ["chrom\tpos\tref\talt\tlabel"]
    for label, positions in ((1, positives), (0, negatives)):
        for p in positions:
            alt = rng.choice([b for b in "ACGT" if b != genome[p]])
            lines.append(f"chrS\t{p + 1}\t{genome[p]}\t{alt}\t{label}")
    path = world["folder"] / "panel.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path
