"""The checked-in typed code equals what its tables generate (``scripts/generate_typed.py`` rewrites it).

* ``hcomm_cffi/_binding_methods.py``: one typed signature per entry of ``binding.C_FUNCTIONS``;
* the per-code exception classes in ``hcomm_cffi/errors.py``: real ``class`` statements, one per
  row of the HcclResult and aclError tables;
* ``hcomm_cffi/__init__.py``'s type-checking imports: exactly the names its lazy ``__getattr__`` serves.
"""
from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from hcomm_cffi import binding, errors

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "hcomm_cffi"
SCRIPT = ROOT / "scripts" / "generate_typed.py"


def _error_block(text: str) -> str:
    begin = text.index("\n" + errors._GENERATED_BEGIN) + 1 + len(errors._GENERATED_BEGIN)
    return text[begin:text.index(errors._GENERATED_END)]


def test_binding_stub_is_up_to_date() -> None:
    assert (PKG / "_binding_methods.py").read_text() == binding.typed_methods_source(), \
        "hcomm_cffi/_binding_methods.py is stale: run python scripts/generate_typed.py"


def test_binding_stub_types_every_table_method() -> None:
    tree = ast.parse((PKG / "_binding_methods.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "BindingMethods")
    typed = {n.name: n for n in ast.walk(cls) if isinstance(n, ast.FunctionDef)}
    assert set(typed) == {e.method for e in binding.C_FUNCTIONS}
    for entry in binding.C_FUNCTIONS:
        fn = typed[entry.method]
        assert fn.returns is not None and all(a.annotation is not None for a in fn.args.args[1:]), entry.method
        assert entry.c_name in (ast.get_docstring(fn) or ""), entry.method
    assert issubclass(binding.Binding, binding.BindingMethods)
    assert not [n for n in vars(binding.BindingMethods) if not n.startswith("__")], \
        "BindingMethods must be empty at run time (the methods are compiled by calltable.install)"


def test_error_classes_are_up_to_date_and_real_classes() -> None:
    text = (PKG / "errors.py").read_text()
    assert _error_block(text) == errors.classes_source(), \
        "the generated classes in hcomm_cffi/errors.py are stale: run python scripts/generate_typed.py"
    classes = {n.name for n in ast.parse(text).body if isinstance(n, ast.ClassDef)}
    tables = [(errors._HCCL_CODES, errors.HCCL_ERROR_CLASSES, errors.HcclError),
              (errors._ACL_CODES, errors.ACL_ERROR_CLASSES, errors.AclError)]
    for codes, lookup, base in tables:
        for code, (c_name, cls_name, hint) in codes.items():
            cls = getattr(errors, cls_name)
            assert cls_name in classes and lookup[code] is cls and cls.__bases__[0] is base
            assert cls.__doc__ == f"{c_name} ({code})." and cls.__module__ == "hcomm_cffi.errors"
            assert issubclass(cls, TimeoutError) == (code in errors._TIMEOUT_CODES)
            err = errors.error_for(code, "HcclAllReduce" if base is errors.HcclError else "aclrtMalloc", "lib says")
            assert type(err) is cls and str(err).startswith(f"{err.function} failed: {c_name} ({code}): lib says")
            assert err.hint == hint


def test_package_type_checking_imports_are_the_lazy_names() -> None:
    import hcomm_cffi

    tree = ast.parse((PKG / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test))
    named = {a.asname or a.name for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names}
    star = {n.module for n in block.body if isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)}
    assert star == {"constants"}
    assert named - {"*"} | set(hcomm_cffi.constants.__all__) == set(hcomm_cffi._LAZY)
    assert set(hcomm_cffi.__all__) == set(hcomm_cffi._LAZY) | {"enums", "errors", "constants", "__version__"}
    assert len(hcomm_cffi.__all__) == len(set(hcomm_cffi.__all__))


def test_the_script_finds_and_rewrites_stale_files(tmp_path: Path) -> None:
    """--check fails on a stale copy and names it; without --check the script rewrites it; then --check passes."""
    shutil.copytree(PKG, tmp_path / "hcomm_cffi", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts")
    stub, errs = tmp_path / "hcomm_cffi" / "_binding_methods.py", tmp_path / "hcomm_cffi" / "errors.py"
    stub.write_text(stub.read_text().replace("def get_rank_id(", "def get_rank_idx("))
    errs.write_text(errs.read_text().replace("class HcclTimeoutError(HcclError, TimeoutError):",
                                             "class HcclTimeoutError(HcclError):"))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(tmp_path / "scripts" / "generate_typed.py"), *args],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)

    check = run("--check")
    assert check.returncode == 1 and "_binding_methods.py is stale" in check.stderr \
        and "errors.py is stale" in check.stderr, check.stderr
    assert run().returncode == 0
    assert run("--check").returncode == 0
    assert stub.read_text() == (PKG / "_binding_methods.py").read_text()
    assert errs.read_text() == (PKG / "errors.py").read_text()


def test_errors_import_refuses_a_block_out_of_step_with_the_tables(tmp_path: Path) -> None:
    """A class whose default_code differs from its table row is an ImportError naming the fix."""
    text = (PKG / "errors.py").read_text().replace("    default_code = 9\n", "    default_code = 99\n")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "acl_codes.py").write_text((PKG / "acl_codes.py").read_text())    # the values errors.py reads
    (package / "errors_copy.py").write_text(text)
    run = subprocess.run([sys.executable, "-c", "import pkg.errors_copy"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode != 0 and "HcclTimeoutError" in run.stderr and "generate_typed.py" in run.stderr

