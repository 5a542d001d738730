"""The device kit: the wheels the GPU check needs on the lent machine, and what one call carries.

The lent machine (../.library/device) has its own Python 3.12 with torch and no network; the
packages it lacks travel as wheels beside the working tree, 64 MiB a call in all. `make gpu-kit`
(`python -m carbon_vep.benchmark.gpu.kit`) downloads the packages of envs/gpu-kit.txt, each at
the version installed here (what the tests ran with), as cp312 manylinux x86_64 wheels (into
.whl-cache/), and writes the kit into .whl/: small wheels as they are, large ones as
`<wheel>.xz`, the same wheel re-zipped without compression and then xz-compressed (polars'
engine, a 51 MiB wheel, travels as 31 MiB: deflate inside a wheel packs a 170 MB library far
less tightly than xz). It prints what one call would carry (the tree and the kit); over 60 MiB
it fails naming the largest items. `scripts/gpu_run.sh` unpacks the `.xz` ones and installs
them all there (`pip install --no-index --no-deps --target`).

The CPU rehearsal (tests/test_gpu_check_smoke.py) builds the same kit for this Python and
gives a fresh venv the image's packages (envs/device-image.txt, linked from this environment)
and nothing else, so a package missing from the kit fails a test here, not on the device.
"""

from __future__ import annotations

import argparse
import lzma
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from carbon_vep.atomic import atomic_path
from carbon_vep.benchmark.harness import PROJECT_ROOT

KIT_LIST = PROJECT_ROOT / "envs/gpu-kit.txt"
IMAGE_LIST = PROJECT_ROOT / "envs/device-image.txt"
CARRY_LIMIT_MIB = 60  # the device's limit is 64 MiB a call: room for $OUT-bound files and drift
SDIST_SUFFIXES = (".tar.gz", ".zip")
PACK_OVER_MIB = 2  # wheels larger than this travel xz-compressed
XZ_PRESET = 6  # 2 min for polars' engine on one core, 31 MiB (preset 9e: 3.6 min, 29.5 MiB)
# pip matches each manylinux tag exactly: the ones wheels of these packages are published under
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


def listed(path: Path) -> list[str]:
    """Package names of a list file (one a line, `#` comments)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def pinned(names: list[str]) -> list[str]:
    """Each name at the version installed in this environment; a name not installed here is an
    error naming the list it came from."""
    missing, out = [], []
    for name in names:
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        raise SystemExit(
            f"{KIT_LIST}: not installed in this environment: {', '.join(missing)} "
            "(run `make setup` first)"
        )
    return out


def download(requirements: list[str], dest: Path, python_version: str) -> list[Path]:
    """Wheels of exactly these requirements (no dependencies) for CPython `python_version` on
    manylinux x86_64; wheels in `dest` not among them are removed (two versions of a package
    would stop the install there)."""
    dest.mkdir(parents=True, exist_ok=True)
    # one pip call for all: without --only-binary (--no-deps allows the platform flags so) a
    # requirement that publishes no wheel comes as its sdist, built below (a call a
    # requirement instead took ~45 s of the CI rehearsal's kit against ~14 s)
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--prefer-binary",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "--dest",
        str(dest),
    ]
    for platform in PLATFORMS:
        argv += ["--platform", platform]
    subprocess.run(argv + requirements, check=True)
    for sdist in sorted(p for p in dest.iterdir() if p.name.endswith(SDIST_SUFFIXES)):
        build_pure_wheel(sdist, dest)
        sdist.unlink()
    wanted = {_wheel_key(r.replace("==", "-")) for r in requirements}
    kept = []
    for wheel in sorted(dest.glob("*.whl")):
        if _wheel_key("-".join(wheel.name.split("-")[:2])) in wanted:
            kept.append(wheel)
        else:
            wheel.unlink()
    if len(kept) != len(requirements):
        raise SystemExit(
            f"{dest}: {len(kept)} wheels for {len(requirements)} requirements: "
            f"{', '.join(w.name for w in kept)}"
        )
    return kept


def build_pure_wheel(sdist: Path, dest: Path) -> Path:
    """A wheel built here from the sdist of a requirement that publishes none (Snakemake's
    connection-pool): kept only when pure Python (`py3-none-any`), which installs on the
    device's Python as on this one; a compiled one is an error naming the sdist."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", tmp]
        subprocess.run([*argv, "--no-binary", ":all:", str(sdist)], check=True)
        [built] = Path(tmp).glob("*.whl")
        if not built.name.endswith("-none-any.whl"):
            raise SystemExit(
                f"{sdist.name}: no wheel for the device's Python, and its sdist "
                f"builds a compiled one ({built.name})"
            )
        return Path(shutil.copy2(built, dest / built.name))


def pack(wheel: Path, dest: Path, preset: int = XZ_PRESET) -> Path:
    """`wheel` as it travels in `dest`: itself when small, else `<wheel>.xz` (its members
    stored uncompressed, in order, then xz): unpacked, it is a valid wheel with the same files.
    An existing pack of the same wheel is kept (packing takes minutes)."""
    dest.mkdir(parents=True, exist_ok=True)
    if wheel.stat().st_size <= PACK_OVER_MIB * 2**20:
        target = dest / wheel.name
        if not target.exists():
            shutil.copy2(wheel, target)
        return target
    target = dest / f"{wheel.name}.xz"
    if target.exists():
        return target
    with (
        atomic_path(target) as partial,
        zipfile.ZipFile(wheel) as source,
        lzma.open(partial, "wb", preset=preset) as raw,
        zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED) as stored,
    ):
        for member in source.infolist():
            stored.writestr(member, source.read(member), zipfile.ZIP_STORED)
    return target


def make_kit(
    requirements: list[str], cache: Path, dest: Path, python_version: str, preset: int = XZ_PRESET
) -> list[Path]:
    """The kit in `dest`: each requirement's wheel, packed; anything else there removed."""
    wheels = download(requirements, cache, python_version)
    kit = [pack(w, dest, preset) for w in wheels]
    for stale in set(dest.iterdir()) - set(kit):
        stale.unlink()
    return kit


def _wheel_key(name_version: str) -> str:
    """`polars-runtime-32-1.2` or `polars_runtime_32-1.2` -> `polars_runtime_32-1.2`."""
    name, _, version = name_version.rpartition("-")
    return f"{name.replace('-', '_').replace('.', '_').lower()}-{version}"


def tree_files(root: Path) -> list[Path]:
    """What a device call sends of the checkout: tracked and untracked files git does not ignore."""
    listed_files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    return [root / p for p in listed_files.split("\0") if p and (root / p).is_file()]


def carry_report(root: Path, kit: list[Path]) -> tuple[int, str]:
    """Bytes one call carries (tree + kit) and a report naming the largest items."""
    items = [(p.stat().st_size, str(p.relative_to(root))) for p in tree_files(root)]
    tree = sum(size for size, _ in items)
    wheels = [(w.stat().st_size, f"{w.parent.name}/{w.name}") for w in kit]
    kit_bytes = sum(size for size, _ in wheels)
    total = tree + kit_bytes
    largest = sorted(items + wheels, reverse=True)[:5]
    head = (
        f"one device call carries {total / 2**20:.1f} MiB: the tree {tree / 2**20:.1f} MiB "
        f"({len(items)} files) + the kit {kit_bytes / 2**20:.1f} MiB ({len(wheels)} wheels); "
        f"limit {CARRY_LIMIT_MIB} MiB"
    )
    names = ", ".join(f"{name} {size / 2**20:.1f} MiB" for size, name in largest)
    return total, f"{head}\nlargest: {names}"


def link_image(site: Path) -> list[str]:
    """Link into `site` every distribution of this environment that the device image also has
    (envs/device-image.txt) and the kit does not carry, with what they need in turn (the image
    holds its packages' own dependencies, at its versions; ours may need others): the
    rehearsal's stand-in for the image. Returns the distribution names linked."""
    carried = {_normal(n) for n in listed(KIT_LIST)}
    installed = {_normal(d.metadata["Name"]): d for d in metadata.distributions()}
    wanted = [n for n in map(_normal, listed(IMAGE_LIST)) if n in installed and n not in carried]
    linked: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in linked:
            continue
        linked.add(name)
        dist = installed[name]
        _link_files(dist, site)
        wanted += [n for n in _needs(dist) if n in installed and n not in carried]
    return sorted(linked)


def _needs(dist: metadata.Distribution) -> list[str]:
    """Names a distribution requires, extras left out, markers evaluated here."""
    from packaging.requirements import Requirement

    out = []
    for text in dist.requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            out.append(_normal(requirement.name))
    return out


def _link_files(dist: metadata.Distribution, site: Path) -> None:
    site.mkdir(parents=True, exist_ok=True)
    for top in {Path(str(f)).parts[0] for f in dist.files or []}:
        source = Path(str(dist.locate_file(top)))
        target = site / top
        if top != ".." and source.exists() and not target.exists():
            target.symlink_to(source)


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", default=str(PROJECT_ROOT / ".whl"), help="the kit (carried)")
    parser.add_argument(
        "--cache",
        default=str(PROJECT_ROOT / ".whl-cache"),
        help="the downloaded wheels (not carried)",
    )
    parser.add_argument("--python-version", default="3.12", help="the device's Python (3.12)")
    parser.add_argument("--xz-preset", type=int, default=XZ_PRESET)
    args = parser.parse_args(argv)
    kit = make_kit(
        pinned(listed(KIT_LIST)),
        Path(args.cache),
        Path(args.dest),
        args.python_version,
        args.xz_preset,
    )
    total, report = carry_report(PROJECT_ROOT, kit)
    print("\n".join(w.name for w in kit))
    print(report)
    if total > CARRY_LIMIT_MIB * 2**20:
        raise SystemExit(f"over {CARRY_LIMIT_MIB} MiB: carry less (see the largest items above)")


if __name__ == "__main__":
    main()
