"""The device kit's parts (carbon_vep/benchmark/gpu/kit.py): a packed wheel unpacks to the same
files, the carry report counts the tree and the kit and names the largest items, and a kit
package not installed here is refused naming the list. The whole kit, installed and run as on
the device, is rehearsed in test_gpu_check_smoke.py."""

import lzma
import random
import subprocess
import zipfile

import pytest

from carbon_vep.benchmark.gpu import kit


def make_wheel(path, payload: bytes):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr("demo/__init__.py", "VALUE = 1\n")
        wheel.writestr("demo/blob.bin", payload)
        wheel.writestr("demo-1.0.dist-info/METADATA", "Name: demo\nVersion: 1.0\n")
    return path


def test_a_large_wheel_travels_xz_packed_and_unpacks_to_the_same_files(tmp_path, monkeypatch):
    monkeypatch.setattr(kit, "PACK_OVER_MIB", 0.01)  # ~10 kB: the test wheel counts as large
    payload = random.Random(0).randbytes(100_000)  # incompressible: the wheel stays ~100 kB
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", payload)
    packed = kit.pack(wheel, tmp_path / "kit", preset=0)
    assert packed.name == "demo-1.0-py3-none-any.whl.xz"
    unpacked = tmp_path / "demo-1.0-py3-none-any.whl"
    unpacked.unlink()
    unpacked.write_bytes(lzma.decompress(packed.read_bytes()))  # what gpu_run.sh does
    with zipfile.ZipFile(unpacked) as again:
        assert [m.filename for m in again.infolist()] == [
            "demo/__init__.py",
            "demo/blob.bin",
            "demo-1.0.dist-info/METADATA",
        ]
        assert again.read("demo/blob.bin") == payload
        assert {m.compress_type for m in again.infolist()} == {zipfile.ZIP_STORED}


def test_a_small_wheel_travels_as_it_is(tmp_path):
    wheel = make_wheel(tmp_path / "demo-1.0-py3-none-any.whl", b"x")
    packed = kit.pack(wheel, tmp_path / "kit")
    assert packed.name == wheel.name and packed.read_bytes() == wheel.read_bytes()


def test_the_carry_report_counts_the_tree_and_the_kit(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(".whl/\n")
    (tmp_path / "code.py").write_bytes(b"a" * 1000)
    (tmp_path / ".whl").mkdir()
    big = tmp_path / ".whl/big-1.0-py3-none-any.whl"
    big.write_bytes(b"b" * 3 * 2**20)
    total, report = kit.carry_report(tmp_path, [big])
    assert total == 1000 + len(".whl/\n") + 3 * 2**20  # ignored files travel only as the kit
    assert "the kit 3.0 MiB (1 wheels)" in report
    assert report.splitlines()[1].startswith("largest: .whl/big-1.0-py3-none-any.whl 3.0 MiB")


def test_a_kit_package_not_installed_here_is_refused_naming_the_list():
    with pytest.raises(SystemExit, match=r"gpu-kit.txt: not installed .*no-such-package"):
        kit.pinned(["polars", "no-such-package"])
    assert kit.pinned(["polars"]) == [f"polars=={kit.metadata.version('polars')}"]


def test_the_kit_list_names_what_the_image_lacks():
    carried = set(kit.listed(kit.KIT_LIST))
    image = set(kit.listed(kit.IMAGE_LIST))
    assert {"polars", "polars-runtime-32", "pysam"} <= carried and not {"polars", "pysam"} & image
    assert "transformers" in carried & image  # carried for its version: the image has 5.17
