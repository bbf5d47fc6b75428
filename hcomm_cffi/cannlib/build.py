"""``hcomm sim build-libs``: compile the emulator into a directory laid out like a CANN install.

Layout of ``DIR``::

    lib64/libhcomm_sim_core.so   the emulator (cffi embedding): exports hcommsim_<F> for every function F
    lib64/libhcomm.so            forwarders F -> hcommsim_F for the functions CANN's libhcomm.so exports
    lib64/libhccl.so             ... libhccl.so's (collectives, HcclBarrier, mc2), see lib/cann.py
    lib64/libacl_rt.so           ... the acl* functions (every host function of acl/acl_rt.h, acl_rt_exports.py);
                                 libascendcl.so is the same for older CANN layouts
    lib64/libmsprofiler.so       ... the aclprof* functions (acl/acl_prof.h), which CANN's profiler library exports
    include/hcomm_sim.h          the C header (header.py); include/hccl/hccl.h etc. include it
    set_env.sh                   sets ASCEND_HOME_PATH / LD_LIBRARY_PATH as CANN's set_env.sh does
    hcomm_sim_version            the marker (marker.py): package version, cdef digest, Python

One embedded library holds the emulator so that one interpreter serves every library of a process;
the vendor-named libraries are real ELF files that depend on it (``DT_NEEDED``, ``RUNPATH=$ORIGIN``)
and export the vendor's names, so ``cc ... -lhcomm -lhccl -lacl_rt`` links (GNU ld does not resolve
symbols through a library's own dependencies) and ``dlopen`` of each name finds its functions.
The install is rebuilt when the package version, the cdef or the Python changes, and reused otherwise.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from typing import Dict, Iterator, List, Sequence, Tuple

from .. import __version__
from .declarations import CORE_PREFIX, Prototype, cdef_digest, exported, types_cdef
from .header import EMULATOR_FUNCTIONS, HEADER_NAME, VENDOR_SIGNATURES, write_headers
from .embedded import UNSUPPORTED_FUNCTION
from .kernel_runner import KERNEL_RUNNER_C
from .securec import LIBC_SEC, LIBC_SEC_C, SECUREC_H
from .startup import core_cdef, core_preamble, failure_code, forwarder, forwarder_prelude
from .vendor_stubs import NOT_SUPPORT, RES_EXPT_HEADER, VENDOR_STUBS
from .acl_rt_exports import ACL_RT_FUNCTIONS, stub_return
from ..files import UnsafePath, checked_dir, open_own, write_atomically
from ..lib.emulated import MARKER_FILE, read_marker, write_marker
from ..sim.compiled import c_compiler

__all__ = ["BuildError", "BuildResult", "build_libs", "check_toolchain", "CORE_LIBRARY", "VENDOR_LIBRARIES",
           "library_functions"]

CORE_LIBRARY = "libhcomm_sim_core.so"
CORE_MODULE = "_hcomm_sim_core"
#: vendor file name -> library key of lib/cann.py whose functions it exports (built in this order)
VENDOR_LIBRARIES: Dict[str, str] = {
    "libacl_rt.so": "acl", "libhcomm.so": "hcomm", "libhccl.so": "hccl", "libascendcl.so": "acl",
    "libmsprofiler.so": "msprofiler",
}
#: vendor file name -> the vendor libraries it depends on (DT_NEEDED, linked --no-as-needed as CANN's are).
#: libhccl.so: hicann/hccl@09300b70df9a:src/hccl.cmake:97-103 links `-Wl,--no-as-needed hcomm hccl_compat acl_rt
#: c_sec unified_dlog`, so a dlsym on libhccl.so's handle finds libhcomm.so's functions (HcclGetRootInfo,
#: HcclGetErrorString) and `-lhccl -Wl,--copy-dt-needed-entries` links a program using them.  libascendcl.so is
#: the prebuilt acl-compat package on CANN (hicann/runtime@681ef7610df1:cmake/third_party/acl_compat.cmake:20):
#: it keeps the acl* entry points and here depends on libacl_rt.so, the library that owns them now.
VENDOR_DEPENDENCIES: Dict[str, Tuple[str, ...]] = {
    "libhccl.so": ("libhcomm.so", "libacl_rt.so"), "libascendcl.so": ("libacl_rt.so",),
}


class BuildError(RuntimeError):
    """The install cannot be built: what is missing and how to get it."""


@dataclass(frozen=True)
class BuildResult:
    """Where the install is, and whether it was built now (False: an up-to-date one was reused)."""

    root: str
    built: bool

    @property
    def lib_dir(self) -> str:
        """``root/lib64``: the value for HCOMM_CANN_LIB_DIR."""
        return os.path.join(self.root, "lib64")

    @property
    def include_dir(self) -> str:
        """``root/include``."""
        return os.path.join(self.root, "include")

    @property
    def set_env(self) -> str:
        """``root/set_env.sh``."""
        return os.path.join(self.root, "set_env.sh")


def build_dir(path: str, what: str) -> str:
    """``path`` as a directory of build outputs (created ``0755``): BuildError naming ``what`` when it is a link, not
    a directory, another user's, or others can write it (they could replace the libraries that get loaded)."""
    try:
        return checked_dir(os.path.abspath(path), what, mode=0o755)
    except UnsafePath as exc:
        raise BuildError(str(exc)) from None


def check_toolchain() -> List[str]:
    """The C compiler command; BuildError naming what is missing (compiler, Python headers, shared libpython)."""
    compiler = c_compiler()
    if compiler is None:
        wanted = (shlex.split(os.environ.get("CC", "")) or ["cc"])[0]
        raise BuildError(f"no C compiler: {wanted!r} was not found on PATH (from $CC or cc/gcc); install one "
                         "(e.g. apt-get install gcc) or set CC to its path")
    header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not os.path.isfile(header):
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        raise BuildError(f"no Python headers: {header} does not exist; install the development package of this "
                         f"Python (e.g. apt-get install python{version}-dev) for {sys.executable}")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        raise BuildError(f"{sys.executable} has no shared libpython (it was built without --enable-shared), so a C "
                         "program could not start the emulator's interpreter; use a Python built with --enable-shared")
    if importlib.util.find_spec("setuptools") is None:
        raise BuildError("cffi needs setuptools to compile; install it (pip install setuptools)")
    return compiler


def _builder_digest() -> str:
    """A short hash of the modules that write the install's C: a change to them rebuilds it."""
    here = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()[:16]


def _stamp() -> Dict[str, str]:
    return {"version": f"hcomm_cffi {__version__} emulator", "package_version": __version__,
            "cdef": cdef_digest(), "builder": _builder_digest(), "package": _package_root(),
            "python": f"{sys.executable} {sys.version.split()[0]}"}


def library_functions(key: str) -> Tuple[Prototype, ...]:
    """The functions the vendor library ``key`` ('hcomm', 'hccl', 'acl') exports, emulator extras included."""
    return tuple(p for p in exported() + EMULATOR_FUNCTIONS if p.library == key)


def _up_to_date(root: str) -> bool:
    marker = read_marker(root)
    if marker is None or any(marker.get(k) != v for k, v in _stamp().items()):
        return False
    needed = [os.path.join("lib64", name) for name in (CORE_LIBRARY, *VENDOR_LIBRARIES, LIBC_SEC)]
    needed += [os.path.join("include", HEADER_NAME), os.path.join("include", "securec.h"), "set_env.sh"]
    return all(os.path.isfile(os.path.join(root, rel)) for rel in needed)


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _package_dirs() -> List[str]:
    """Where the building Python finds the emulator's dependencies: its site directories, and the directories
    holding numpy and cffi wherever they came from (a virtualenv, PYTHONPATH, the user site)."""
    dirs = [sysconfig.get_paths()[key] for key in ("purelib", "platlib")]
    for name in ("numpy", "cffi", "_cffi_backend"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            top = os.path.dirname(spec.origin)
            dirs.append(os.path.dirname(top) if name != "_cffi_backend" else top)
    return list(dict.fromkeys(d for d in dirs if os.path.isdir(d)))


def _init_code(functions: Sequence[Tuple[str, str]]) -> str:
    build_path = _package_dirs()
    return f"""\
import sys
from {CORE_MODULE} import ffi, lib
try:
    _ROOT = {_package_root()!r}          # the hcomm_cffi that built this library
    if lib.hcommsim_started_interpreter():   # a C program: that package and the building Python's ones first
        _first = [_ROOT] + {build_path!r}
        sys.path[:] = _first + [p for p in sys.path if p not in _first]
    elif "hcomm_cffi" not in sys.modules and _ROOT not in sys.path:
        sys.path.insert(0, _ROOT)
    from hcomm_cffi.cannlib.embedded import bind
    bind(ffi, {list(functions)!r}, {CORE_PREFIX!r}, c_program=bool(lib.hcommsim_started_interpreter()))
except BaseException as exc:            # every call then returns an error naming this
    lib.hcommsim_note_start_error(f"the emulator did not start: {{type(exc).__name__}}: {{exc}}".encode())
    raise
"""


#: the core's own entry point for the stubs of vendor_stubs.py (exported by no vendor library)
_UNSUPPORTED = Prototype("int32_t", UNSUPPORTED_FUNCTION, "const char* function", "")


def _core_prototypes() -> Tuple[Prototype, ...]:
    later = tuple(stub.prototype for stub in VENDOR_STUBS if stub.emulated)
    return exported() + EMULATOR_FUNCTIONS + later + (_UNSUPPORTED,)


def _core_functions() -> List[Tuple[str, str]]:
    return [(p.name, f"{p.ret}(*)({p.params or 'void'})") for p in _core_prototypes()]


def _build_core(include_dir: str, work: str) -> str:
    import cffi

    builder = cffi.FFI()
    builder.cdef(types_cdef() + core_cdef)
    prefixed = "\n".join(p.declaration(CORE_PREFIX + p.name) for p in _core_prototypes())
    builder.embedding_api(prefixed)
    preamble = core_preamble(HEADER_NAME, sys.executable, sys.base_prefix) + KERNEL_RUNNER_C
    builder.set_source(CORE_MODULE, preamble, include_dirs=[include_dir],
                       extra_link_args=[f"-Wl,-soname,{CORE_LIBRARY}"])
    builder.embedding_init_code(_init_code(_core_functions()))
    try:
        return str(builder.compile(tmpdir=work, target=CORE_LIBRARY, verbose=False))
    except Exception as exc:
        raise BuildError(f"compiling {CORE_LIBRARY} failed: {exc}") from exc


def _forwarders(key: str) -> str:
    lines = [forwarder_prelude(HEADER_NAME), f'#include "{RES_EXPT_HEADER}"', ""]
    for proto in library_functions(key):
        args = ", ".join(name for _, name in proto.param_list)
        params, call_args = VENDOR_SIGNATURES.get(proto.name, (proto.params or "void", args))
        lines.extend(forwarder(proto, params, call_args, CORE_PREFIX + proto.name))
    unsupported = CORE_PREFIX + UNSUPPORTED_FUNCTION
    lines.append(f"extern {_UNSUPPORTED.declaration(unsupported)}")
    for stub in VENDOR_STUBS:
        if stub.library != key:
            continue
        if stub.emulated:
            args = ", ".join(name for _, name in stub.prototype.param_list)
            lines.extend(forwarder(stub.prototype, stub.params, args, CORE_PREFIX + stub.name))
            continue
        code = failure_code(stub.prototype)
        lines += [f"{stub.returns} {stub.name}({stub.params}) {{   /* stub: HCCL_E_NOT_SUPPORT ({NOT_SUPPORT}) */",
                  f'    if (!hcommsim_ready("{stub.name}", "{code.split(")")[-1]}")) return {code};',
                  f'    return ({stub.returns}){unsupported}("{stub.name}");', "}"]
    if key == "acl":
        lines += _acl_rt_stubs(unsupported)
    return "\n".join(lines) + "\n"


def _acl_rt_stubs(unsupported: str) -> List[str]:
    """The acl/acl_rt.h functions the cdef does not declare: exported stubs naming themselves (acl_rt_exports.py)."""
    declared = {p.name for p in _core_prototypes()}
    lines = []
    for name in ACL_RT_FUNCTIONS:
        if name in declared:
            continue                        # forwarded to the emulator like every declared function
        ret, value = stub_return(name)
        lines += [f"{ret} {name}(void) {{   /* stub: not supported by the emulator */",
                  f'    if (!hcommsim_ready("{name}", "{value}")) return {value};',
                  f'    (void){unsupported}("{name}");', f"    return {value};", "}"]
    return lines


def _run(cmd: List[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(shlex.quote(c) for c in cmd)} failed (exit {proc.returncode}):\n{proc.stderr}")


def _build_vendor(compiler: List[str], name: str, key: str, include_dir: str, lib_dir: str, work: str) -> str:
    source = write_atomically(os.path.join(work, f"{name}.c"), _forwarders(key))
    target = os.path.join(work, name)
    needed = [f"-l:{dep}" for dep in VENDOR_DEPENDENCIES.get(name, ())]
    _run(compiler + ["-shared", "-fPIC", "-O2", "-I", include_dir, "-o", target, source, "-L", lib_dir,
                     "-Wl,--no-as-needed", f"-l:{CORE_LIBRARY}", *needed, "-Wl,--as-needed", "-Wl,-rpath,$ORIGIN",
                     f"-Wl,-soname,{name}"])
    return target


def _build_securec(compiler: List[str], include_dir: str, work: str) -> str:
    """include/securec.h and libc_sec.so (cannlib/securec.py): CANN's bounds-checked C functions."""
    write_atomically(os.path.join(include_dir, "securec.h"), SECUREC_H)
    source = write_atomically(os.path.join(work, "securec.c"), LIBC_SEC_C)
    target = os.path.join(work, LIBC_SEC)
    _run(compiler + ["-shared", "-fPIC", "-O2", "-I", include_dir, "-o", target, source, f"-Wl,-soname,{LIBC_SEC}"])
    return target


def _set_env_text(root: str) -> str:
    return f"""\
# set_env.sh of the hcomm_cffi emulated CANN install at {root}
# Source it as CANN's (source /usr/local/Ascend/cann/set_env.sh): the libraries in lib64 are the
# hcomm_cffi emulator (see {MARKER_FILE}), not CANN.
export ASCEND_HOME_PATH={shlex.quote(root)}
export ASCEND_TOOLKIT_HOME={shlex.quote(root)}
export LD_LIBRARY_PATH="${{ASCEND_HOME_PATH}}/lib64${{LD_LIBRARY_PATH:+:${{LD_LIBRARY_PATH}}}}"
"""


@contextlib.contextmanager
def _locked(root: str) -> Iterator[None]:
    lock = open_own(os.path.join(root, ".build.lock"), "build lock")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)     # concurrent builders of one DIR wait for each other
        yield
    finally:
        os.close(lock)


def build_libs(out: str, force: bool = False) -> BuildResult:
    """Build (or reuse) the emulated CANN install in ``out``; BuildError when something is missing."""
    root = build_dir(out, "--out")
    with _locked(root):
        if not force and _up_to_date(root):
            return BuildResult(root, built=False)
        compiler = check_toolchain()
        marker = os.path.join(root, MARKER_FILE)
        if os.path.exists(marker):
            os.unlink(marker)                # an interrupted rebuild must not look complete
        include_dir = build_dir(os.path.join(root, "include"), "--out")
        lib_dir = build_dir(os.path.join(root, "lib64"), "--out")
        write_headers(include_dir)
        with tempfile.TemporaryDirectory(prefix=".build-", dir=root) as work:
            os.replace(_build_securec(compiler, include_dir, work), os.path.join(lib_dir, LIBC_SEC))
            core = _build_core(include_dir, work)
            os.replace(core, os.path.join(lib_dir, CORE_LIBRARY))
            for name, key in VENDOR_LIBRARIES.items():
                built = _build_vendor(compiler, name, key, include_dir, lib_dir, work)
                os.replace(built, os.path.join(lib_dir, name))
        write_atomically(os.path.join(root, "set_env.sh"), _set_env_text(root))
        write_marker(root, _stamp())
    return BuildResult(root, built=True)
