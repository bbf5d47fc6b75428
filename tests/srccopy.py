"""Copy the package sources to a scratch directory, so a build never writes into the checkout."""
from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "setup.py", "build_ffi.py", "README.md", "LICENSE", "MANIFEST.in")


def copy_sources(dst: Path) -> Path:
    """``dst`` filled with the build files and the package (without caches or the generated cffi module)."""
    dst.mkdir(parents=True, exist_ok=True)
    for name in SOURCES:
        if (REPO / name).exists():
            shutil.copy2(REPO / name, dst / name)
    if not (dst / "README.md").exists():       # pyproject names it; the real one may not be written yet
        (dst / "README.md").write_text("hcomm_cffi\n")
    for package in ("hcomm_cffi", "hcomm"):    # hcomm: the seed's import name for the same package
        shutil.copytree(REPO / package, dst / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_hcomm_ffi.py"))
    return dst
