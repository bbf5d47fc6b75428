"""The emulated CANN install the C-library tests share: built once per session (reused by every module)."""
from __future__ import annotations

import os
from typing import Any, Dict

import pytest


@pytest.fixture(scope="session")
def install(tmp_path_factory: Any) -> Any:
    """The emulated CANN install (skipped without a C compiler / Python headers); later modules reuse the build."""
    from hcomm_cffi.cannlib.build import BuildError, build_libs, check_toolchain

    try:
        check_toolchain()
    except BuildError as exc:
        pytest.skip(f"cannot build the emulated CANN libraries here: {exc}")
    # built as ~/hcomm-cann of a home directory of its own, so a page's `--out ~/hcomm-cann` can find it up to date
    # (tests/test_docs_examples.py: HOME is that directory; build-libs refuses an --out that is a link)
    home = tmp_path_factory.getbasetemp() / "cann-home"
    home.mkdir(exist_ok=True)
    return build_libs(str(home / "hcomm-cann"))


def child_env(install: Any, repo: str, **extra: str) -> Dict[str, str]:
    """The environment of a program run against the install, as after ``source set_env.sh``."""
    env = dict(os.environ)
    for name in ("HCOMM_BACKEND", "HCOMM_CANN_LIB_DIR", "ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([repo] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["ASCEND_HOME_PATH"] = install.root
    env["LD_LIBRARY_PATH"] = install.lib_dir + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    env.update(extra)
    return env
