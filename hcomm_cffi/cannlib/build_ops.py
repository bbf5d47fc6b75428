"""``hcomm sim build-ops``: build a custom communication operator package and install it, the vendor's way.

The emulator's counterpart of the vendor's ``bash build.sh --vendor=V --ops=O --custom_ops_path=DIR`` plus
installing the ``.run`` it makes (hicann/hccl@09300b70 examples/04_custom_ops_p2p/README_en.md sections 2-3).
The package's sources are compiled unchanged against an emulated install (``hcomm sim build-libs``) with the
vendor's flags (examples/04_custom_ops_p2p/CMakeLists.txt:38-62, 88-96) and installed in its layout::

    opp/vendors/V/include/hccl_custom_*.h                       the package's public headers (inc/)
    opp/vendors/V/lib64/libhccl_custom_O.so                      op_host/*.cc + *.asc + op_kernel_aicpu/*.aicpu
    opp/vendors/V/aicpu/config/*.json                            op_kernel_aicpu/*.json (names the kernel .so)
    opp/vendors/V/aicpu/kernel/aicpu_hccl_custom_O.tar.gz        the AICPU kernel package (aicpu_kernels_device/)
    opp/vendors/V/aicpu/kernel/aicpu_kernels_device/<kernelSo>   it unpacked, as the device loads it

The kernel .so is op_kernel_aicpu/*.cc linked with the emulated libhcomm.so (the device's libccl_kernel.so).
ASC sources (``.asc``, with ``kernel<<<blockDim, l2ctrl, stream>>>(args, size)`` launches, and ``.aicpu``
kernels) need the vendor's bisheng compiler: here ``.aicpu`` compiles as C++ into the host library and each
``<<<...>>>`` launch becomes a call of the install's ``HcommSimAscLaunchAicpu`` (sim/aicpu.py), the same
launch as aclrtLaunchKernelWithConfig; ``#line`` keeps the compiler's messages on the original file.
"""
from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Sequence

from ..files import write_atomically
from ..lib.emulated import read_marker
from .build import BuildError, build_dir

__all__ = ["OpsPackage", "build_ops", "ASC_LAUNCH", "rewrite_asc_launches"]

_NAME = re.compile(r"^[A-Za-z0-9_]+$")
#: examples/04_custom_ops_p2p/CMakeLists.txt:38-50 (host library) and :99-101 (AICPU kernel)
HOST_FLAGS = ("-std=c++14", "-U_FORTIFY_SOURCE", "-Werror", "-fno-common", "-fno-strict-aliasing", "-pipe", "-g",
              "-O0", "-fstack-protector-all", "-D_GLIBCXX_USE_CXX11_ABI=0", "-DHOST_COMPILE", "-fPIC")
HOST_LINK = ("-Wl,-z,relro", "-Wl,-z,now", "-Wl,-z,noexecstack")
KERNEL_FLAGS = ("-DAICPU_COMPILE", "-g", "-O0", "-fPIC")
#: the emulated install's libraries a host library links (the vendor's: hcomm c_sec ... ascendcl, CMakeLists.txt:63)
HOST_LIBS = ("-lhcomm", "-lacl_rt", "-lascendcl", "-lc_sec")
ASC_LAUNCH = "HcommSimAscLaunchAicpu"
#: kernel<<<blockDim, l2ctrl, stream>>>(args, argsSize)
_ASC_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*<<<\s*([^,<>]+?)\s*,\s*([^,<>]+?)\s*,\s*([^<>]+?)\s*>>>\s*\(")
AICPU_API_H = """/* aicpu_api.h of the hcomm_cffi emulated CANN install (written by `hcomm sim build-ops`): an AICPU kernel
 * of an ASC source is plain C++ here; `hcomm sim build-ops` turns its <<<>>> launches into HcommSimAscLaunchAicpu. */
#ifndef HCOMM_SIM_AICPU_API_H
#define HCOMM_SIM_AICPU_API_H
#define __global__
#define __aicpu__
#include "../../../include/hcomm_sim.h"
#endif
"""


@dataclass(frozen=True)
class OpsPackage:
    """What ``build_ops`` installed, all under ``root`` (= opp/vendors/<vendor> of the install)."""

    root: str
    host_library: str
    kernel_libraries: List[str]
    configs: List[str]
    headers: List[str]


def rewrite_asc_launches(text: str) -> str:
    """An ASC source with each ``k<<<b, l2, s>>>(args...)`` made ``HcommSimAscLaunchAicpu((void *)&k, "k", b, s, args...)``."""
    return _ASC_CALL.sub(lambda m: f'{ASC_LAUNCH}((void *)&{m.group(1)}, "{m.group(1)}", {m.group(2)}, {m.group(4)}, ',
                         text)


def _compiler() -> List[str]:
    compiler = shlex.split(os.environ.get("CXX", "")) or [shutil.which("g++") or shutil.which("c++") or "g++"]
    if shutil.which(compiler[0]) is None:
        raise BuildError(f"no C++ compiler: {compiler[0]!r} was not found on PATH (from $CXX or g++/c++); install "
                         "one (e.g. apt-get install g++) or set CXX")
    return compiler


def _run(cmd: Sequence[str], what: str) -> None:
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise BuildError(f"{what}: the compiler did not finish within 600 s") from None
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip()
        raise BuildError(f"{what} failed (exit {proc.returncode}):\n{message}\ncommand: "
                         f"{' '.join(shlex.quote(c) for c in cmd)}")


def _sources(directory: str, *patterns: str) -> List[str]:
    return sorted(p for pattern in patterns for p in glob.glob(os.path.join(directory, pattern)))


def _kernel_names(configs: Sequence[str]) -> List[str]:
    """The kernel .so names the package's JSON files give (``kernelSo``)."""
    names = []
    for path in configs:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as exc:
            raise BuildError(f"{path}: not a readable kernel JSON: {exc}") from None
        for key, value in (doc.items() if isinstance(doc, dict) else []):
            so = value.get("opInfo", {}).get("kernelSo") if isinstance(value, dict) else None
            if not isinstance(so, str) or not so.endswith(".so") or os.path.basename(so) != so:
                raise BuildError(f"{path}: kernel {key!r} has no opInfo.kernelSo naming a .so file (got {so!r})")
            names.append(so)
    if not names:
        raise BuildError(f"no kernel declared: {', '.join(configs)} name no opInfo.kernelSo")
    return sorted(set(names))


def _compile(compiler: List[str], source: str, flags: Sequence[str], includes: Sequence[str], work: str,
             language: str = "") -> str:
    obj = os.path.join(work, f"{len(os.listdir(work))}-{os.path.basename(source)}.o")
    cmd = compiler + list(flags) + [f"-I{d}" for d in includes] + (["-x", language] if language else [])
    _run(cmd + ["-c", source, "-o", obj], f"compiling {source}")
    return obj


def _asc_as_cpp(source: str, work: str) -> str:
    """An .asc/.aicpu source as C++ the host compiler takes (launches rewritten, messages on the original lines)."""
    with open(source, encoding="utf-8") as f:
        text = f.read()
    return write_atomically(os.path.join(work, os.path.basename(source) + ".cc"),
                            f'#line 1 "{source}"\n' + rewrite_asc_launches(text))


def _install(src: str, dst: str) -> None:
    """Copy ``src`` to ``dst`` atomically (its mode kept), into a directory only this user can write."""
    build_dir(os.path.dirname(dst), "--install-path")
    with open(src, "rb") as f:
        write_atomically(dst, f.read(), stat.S_IMODE(os.stat(src).st_mode))


def build_ops(vendor: str, ops: str, custom_ops_path: str, install_path: str) -> OpsPackage:
    """Compile the package at ``custom_ops_path`` and install it into ``install_path``/opp/vendors/``vendor``."""
    for what, value in (("--vendor", vendor), ("--ops", ops)):
        if not _NAME.match(value or ""):
            raise BuildError(f"{what} {value!r}: expected letters, digits and '_' (it names installed files)")
    root = os.path.abspath(install_path)
    if read_marker(root) is None:
        raise BuildError(f"--install-path {install_path!r} is not an emulated CANN install (no hcomm_sim_version "
                         f"there); make one with `hcomm sim build-libs --out {install_path}`")
    src = os.path.abspath(custom_ops_path)
    host_dir, kernel_dir, inc_dir = (os.path.join(src, d) for d in ("op_host", "op_kernel_aicpu", "inc"))
    for d in (host_dir, kernel_dir):
        if not os.path.isdir(d):
            raise BuildError(f"--custom-ops-path {custom_ops_path!r}: {d} is missing; an operator package has op_host/ "
                             "(the host library) and op_kernel_aicpu/ (the AICPU kernel and its JSON)")
    host_sources = _sources(host_dir, "*.cc", "*.cpp")
    asc_sources = _sources(host_dir, "*.asc") + _sources(kernel_dir, "*.aicpu")
    kernel_sources = _sources(kernel_dir, "*.cc", "*.cpp")
    configs = _sources(kernel_dir, "*.json")
    for what, found, where in (("host sources (*.cc)", host_sources, host_dir),
                               ("kernel sources (*.cc)", kernel_sources, kernel_dir),
                               ("kernel JSON (*.json)", configs, kernel_dir)):
        if not found:
            raise BuildError(f"no {what} in {where}")
    kernel_names = _kernel_names(configs)
    compiler = _compiler()
    asc_dir = build_dir(os.path.join(root, "asc", "include", "aicpu_api"), "--install-path")
    write_atomically(os.path.join(asc_dir, "aicpu_api.h"), AICPU_API_H)
    # examples/04_custom_ops_p2p/CMakeLists.txt:14-24 HCCL_CUSTOM_OPS_INCLUDE_LIST
    includes = [inc_dir, host_dir, kernel_dir, os.path.join(root, "include"), os.path.join(root, "include", "hccl"),
                asc_dir, os.path.join(root, "pkg_inc")]
    lib_dir = os.path.join(root, "lib64")
    vendor_root = os.path.join(root, "opp", "vendors", vendor)
    host_name = f"libhccl_custom_{ops}.so"
    with tempfile.TemporaryDirectory(prefix="hcomm-build-ops-") as work:
        objects = [_compile(compiler, s, HOST_FLAGS, includes, work) for s in host_sources]
        for s in asc_sources:
            objects.append(_compile(compiler, _asc_as_cpp(s, work), HOST_FLAGS, includes + [os.path.dirname(s)], work))
        host = os.path.join(work, host_name)
        _run(compiler + ["-shared", "-o", host, *objects, *HOST_LINK, f"-L{lib_dir}", *HOST_LIBS,
                         f"-Wl,-soname,{host_name}"], f"linking {host_name}")
        kernel_objects = [_compile(compiler, s, KERNEL_FLAGS, includes, work) for s in kernel_sources]
        kernels: Dict[str, str] = {}
        for name in kernel_names:
            kernels[name] = os.path.join(work, name)
            # the device's libccl_kernel.so is the emulated libhcomm.so; found without LD_LIBRARY_PATH (RUNPATH)
            _run(compiler + ["-shared", "-o", kernels[name], *kernel_objects, f"-L{lib_dir}", "-lhcomm",
                             f"-Wl,-rpath,{lib_dir}", f"-Wl,-soname,{name}"], f"linking the AICPU kernel {name}")
        tar_path = os.path.join(work, f"aicpu_hccl_custom_{ops}.tar.gz")
        with tarfile.open(tar_path, "w:gz") as tar:
            for name, path in kernels.items():
                tar.add(path, arcname=f"aicpu_kernels_device/{name}")
        # install: every file replaced atomically
        _install(host, os.path.join(vendor_root, "lib64", host_name))
        installed_kernels = []
        for name, path in kernels.items():
            dst = os.path.join(vendor_root, "aicpu", "kernel", "aicpu_kernels_device", name)
            _install(path, dst)
            installed_kernels.append(dst)
        _install(tar_path, os.path.join(vendor_root, "aicpu", "kernel", os.path.basename(tar_path)))
    installed_configs = []
    for path in configs:
        dst = os.path.join(vendor_root, "aicpu", "config", os.path.basename(path))
        _install(path, dst)
        installed_configs.append(dst)
    headers = []
    for path in _sources(inc_dir, "hccl_custom_*.h"):
        dst = os.path.join(vendor_root, "include", os.path.basename(path))
        _install(path, dst)
        headers.append(dst)
    return OpsPackage(vendor_root, os.path.join(vendor_root, "lib64", host_name), installed_kernels,
                      installed_configs, headers)
