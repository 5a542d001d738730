"""User mistakes on the command line end in one error line naming the file or setting and exit
code 2, never a traceback, and no output is half-written; `score` says what the panel check
found, as check-panel does."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from support.files import random_dna, write_fasta

from carbon_vep.cli import main

DEMO_FASTA = Path(__file__).resolve().parents[2] / "resources/demo/chr17.hg19.part.fa"


def _panel(path: Path, rows: list[str]) -> Path:
    path.write_text("chrom\tpos\tref\talt\n" + "".join(r + "\n" for r in rows))
    return path


def _check(panel: Path, out: str, summary: str) -> list[str]:
    return ["check-panel", "--panel", str(panel), "--reference", str(DEMO_FASTA)] + [
        "--build", "hg19", "--out", out, "--summary", summary
    ]  # fmt: skip


def test_check_panel_summary_under_a_file_writes_nothing(tmp_path, caplog):
    panel = _panel(tmp_path / "p.tsv", ["chr17\t5883\tG\tA"])
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "checked.parquet"
    assert main(_check(panel, str(out), str(tmp_path / "afile/summary.json"))) == 2
    assert not out.exists()  # not half of the pair
    assert "afile is a file, not a directory" in caplog.text


def test_check_panel_out_that_is_a_directory_is_named(tmp_path, caplog):
    panel = _panel(tmp_path / "p.tsv", ["chr17\t5883\tG\tA"])
    (tmp_path / "adir").mkdir()
    summary = tmp_path / "s.json"
    assert main(_check(panel, str(tmp_path / "adir"), str(summary))) == 2
    assert not summary.exists()
    assert "adir: is a directory" in caplog.text


def test_check_panel_logs_contig_aliases_and_unscoreable_rows(tmp_path, caplog):
    panel = _panel(tmp_path / "p.tsv", ["17\t5883\tG\tA", "chr17\t1,562\tG\tA"])
    caplog.set_level(logging.INFO, "carbon_vep")
    out, summary = tmp_path / "c.parquet", tmp_path / "s.json"
    assert main(_check(panel, str(out), str(summary))) == 0
    assert "17 -> chr17" in caplog.text
    assert "1 of 2 rows will not be scored, e.g. POS '1,562' is not an integer" in caplog.text


def _score(demo_model_dir, panel: Path, reference: Path, out: Path, *extra: str) -> list[str]:
    return [
        "score", "--panel", str(panel), "--reference", str(reference), "--build", "hg19",
        "--model", str(demo_model_dir), "--trust-remote-code", "--out", str(out), *extra,
    ]  # fmt: skip


def test_score_logs_the_panel_check(demo_model_dir, tmp_path, caplog):
    panel = _panel(tmp_path / "p.tsv", ["chr17\t5883\tG\tA", "chr17\t1,562\tG\tA"])
    caplog.set_level(logging.INFO, "carbon_vep")
    out = tmp_path / "s.parquet"
    args = _score(demo_model_dir, panel, DEMO_FASTA, out, "--recipe", "nexttoken")
    assert main([*args, "--window-bp", "60"]) == 0
    assert "checked 2 rows: {'invalid': 1, 'ok': 1}" in caplog.text
    assert "1 of 2 rows will not be scored" in caplog.text
    # the check's note (one REF compared: too few to vouch for the build), said once
    notes = [r for r in caplog.records if "too few to confirm" in r.getMessage()]
    assert len(notes) == 1


def test_a_window_longer_than_the_model_is_a_user_error(demo_model_dir, tmp_path, caplog):
    reference = write_fasta(tmp_path / "big.fa", {"chr17": random_dna(120_000, 7)})
    ref = random_dna(120_000, 7)[59_999]
    alt = next(b for b in "ACGT" if b != ref)
    panel = _panel(tmp_path / "p.tsv", [f"chr17\t60000\t{ref}\t{alt}"])
    out = tmp_path / "s.parquet"
    args = _score(demo_model_dir, panel, reference, out, "--recipe", "centered")
    assert main([*args, "--window-bp", "60000"]) == 2
    assert "supports 8,192, 49,146 bp; lower `--window-bp` to at most 49,146" in caplog.text
    assert not out.exists()


def test_a_bad_setting_value_is_a_user_error(demo_model_dir, tmp_path, caplog):
    panel = _panel(tmp_path / "p.tsv", ["chr17\t5883\tG\tA"])
    args = _score(demo_model_dir, panel, DEMO_FASTA, tmp_path / "s.parquet", "--recipe", "centered")
    assert main([*args, "--window-bp", "-6"]) == 2
    assert "`--window-bp` is -6; the minimum is 6" in caplog.text


def test_a_model_folder_without_its_tokenizer_config_is_named(demo_model_dir, tmp_path, caplog):
    model = tmp_path / "model"
    shutil.copytree(demo_model_dir, model)
    (model / "tokenizer_config.json").unlink()
    panel = _panel(tmp_path / "p.tsv", ["chr17\t5883\tG\tA"])
    args = _score(model, panel, DEMO_FASTA, tmp_path / "s.parquet", "--recipe", "nexttoken")
    assert main(args) == 2
    assert f"{model}/tokenizer_config.json: missing" in caplog.text


def test_merge_with_missing_shard_scores_is_a_user_error(tmp_path, caplog):
    panel = _panel(tmp_path / "p.tsv", ["chr17\t5883\tG\tA"])
    checked = tmp_path / "c.parquet"
    assert main(_check(panel, str(checked), str(tmp_path / "s.json"))) == 0
    out = tmp_path / "m.parquet"
    assert main(["merge", "--checked", str(checked), "--out", str(out)]) == 2
    assert "1 scoreable variants have no score" in caplog.text and not out.exists()
    missing = str(tmp_path / "nope.parquet")
    assert main(["merge", "--checked", str(checked), "--scores", missing, "--out", str(out)]) == 2
    assert "nope.parquet: cannot read" in caplog.text


def test_a_head_we_do_not_apply_is_a_user_error(demo_model_dir, tmp_path, caplog, monkeypatch):
    """The start-up probe's refusal (the model's logits scaled after its output layer, as a
    logit scale or softcap would) is one line naming the model, exit 2, no output."""
    from carbon_vep.model import loading

    load_model = loading.load_model

    def with_scaled_logits(*args, **kwargs):
        loaded = load_model(*args, **kwargs)
        head = loaded.model.get_output_embeddings()
        head.register_forward_hook(lambda module, inputs, logits: logits * 1.05)
        return loaded

    monkeypatch.setattr(loading, "load_model", with_scaled_logits)
    panel = _panel(tmp_path / "p.tsv", ["chr17\t5883\tG\tA"])
    out = tmp_path / "s.parquet"
    args = _score(demo_model_dir, panel, DEMO_FASTA, out, "--recipe", "nexttoken")
    assert main([*args, "--window-bp", "60"]) == 2
    refusal = f"{demo_model_dir}: the model's output layer does not match hidden @ lm_head.T"
    assert refusal in caplog.text and "Traceback" not in caplog.text
    assert not out.exists()
