"""The emulated npu device's C++ extension: compiled on first use with torch.utils.cpp_extension, then cached.

The cache is a directory private to this user (mode 0700, owned by this uid, not a symlink; anything else is
refused with an error naming it), keyed by the source's hash, the torch version and the Python ABI, so a
changed source or another torch builds anew and nobody else can plant a library this process would load.
Ranks that start together share one build: torch's loader serialises them with a lock file in the directory.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import stat
import sys
from pathlib import Path
from types import ModuleType

from .. import settings

__all__ = ["SOURCE", "NAME", "cache_dir", "is_built", "load"]

SOURCE = Path(__file__).resolve().parent / "csrc" / "npu_device.cpp"


def _private_dir(path: Path) -> Path:
    """``path`` created as (or checked to be) a directory of this user only; a clear error otherwise."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise RuntimeError(f"the emulated npu device cannot create its build cache {path}: {exc}; set "
                           "HCOMM_NPU_EXT_DIR to a directory of yours") from None
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise RuntimeError(f"the emulated npu device's build cache {path} is not a plain directory; expected a "
                           "directory of this user (set HCOMM_NPU_EXT_DIR)")
    if info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise RuntimeError(f"the emulated npu device's build cache {path} belongs to uid {info.st_uid} with mode "
                           f"{stat.S_IMODE(info.st_mode):o}; expected a directory owned by uid {os.getuid()} that "
                           "nobody else can write (set HCOMM_NPU_EXT_DIR)")
    return path


def cache_dir() -> Path:
    """This source's build directory: ``HCOMM_NPU_EXT_DIR`` or ``$XDG_CACHE_HOME|~/.cache/hcomm_cffi/npu``."""
    import torch

    root = settings.value("HCOMM_NPU_EXT_DIR")
    if root is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "hcomm_cffi", "npu")
    key = hashlib.sha256(SOURCE.read_bytes() + torch.__version__.encode() + sys.version.encode()).hexdigest()[:16]
    return _private_dir(_private_dir(Path(root)) / key)


NAME = "hcomm_npu_device"
_BUILT = "built"   # written once a build has loaded: the library in the directory is whole


def is_built() -> bool:
    """True when this source's extension is in the cache, ready to load."""
    where = cache_dir()
    return (where / _BUILT).is_file() and (where / f"{NAME}.so").is_file()


def load() -> ModuleType:
    """The compiled extension (built here the first time, about 20 s; then loaded from the cache)."""
    where = cache_dir()
    library = where / f"{NAME}.so"
    if is_built() and NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(NAME, library)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[NAME] = module
            return module
    from torch.utils import cpp_extension

    try:
        module = cpp_extension.load(name=NAME, sources=[str(SOURCE)], build_directory=str(where),
                                    extra_cflags=["-O2"], verbose=False)
    except (OSError, RuntimeError) as exc:
        raise RuntimeError(f"the emulated npu device could not build its extension in {where}: {exc}. It needs a C++ "
                           "compiler (g++), ninja (pip install ninja) and the Python headers") from exc
    (where / _BUILT).touch()
    return module
