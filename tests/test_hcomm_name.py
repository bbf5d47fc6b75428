"""``import hcomm`` is the package itself: one module object, every public name the same object, no second copy."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    """Run ``code`` in a fresh interpreter (the import happens there for the first time)."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_hcomm_is_the_package_module_itself() -> None:
    out = _run("import hcomm, hcomm_cffi\n"
               "assert hcomm is hcomm_cffi\n"
               "names = hcomm_cffi.__all__\n"
               "assert names and all(getattr(hcomm, n) is getattr(hcomm_cffi, n) for n in names)\n"
               "print(len(names))")
    assert int(out) > 30


def test_submodules_under_the_name_hcomm_are_the_same_modules() -> None:
    """``import hcomm.api.comm`` must not load comm.py a second time (a second Comm class)."""
    out = _run("import sys, hcomm.api.comm as a\n"
               "import hcomm_cffi.api.comm as b, hcomm, hcomm_cffi\n"
               "from hcomm.api import Comm\n"
               "assert a is b and Comm is hcomm_cffi.Comm and hcomm.api is hcomm_cffi.api\n"
               "assert sys.modules['hcomm.api.comm'] is b\n"
               "copies = [n for n, m in sys.modules.items() if getattr(m, '__file__', None) == b.__file__]\n"
               "print(sorted(copies))")
    assert out == "['hcomm.api.comm', 'hcomm_cffi.api.comm']"


def test_a_name_the_package_lacks_is_an_import_error() -> None:
    out = _run("try:\n    import hcomm.no_such_module\nexcept ModuleNotFoundError as e:\n    print(e.name)")
    assert out == "hcomm.no_such_module"


def test_the_seed_calls_are_there() -> None:
    """The seed's module calls and Comm methods, by the names the seed's programs use."""
    import hcomm  # noqa: F401  (this interpreter too)
    import hcomm_cffi

    assert hcomm is hcomm_cffi
    for name in ("init", "set_device", "finalize", "Comm", "wait_all"):
        assert callable(getattr(hcomm, name)), name
    for name in ("get_rank", "get_size", "send", "recv", "isend", "irecv", "send_multi", "recv_multi", "destroy"):
        assert callable(getattr(hcomm.Comm, name)), name
