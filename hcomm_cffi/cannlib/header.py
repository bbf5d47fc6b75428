"""The C header of the emulated CANN install, generated from the package's cdef, constants and initializers.

``include/hcomm_sim.h`` holds everything: the typedefs, enums and structs of the cdef, the headers'
constants (:mod:`hcomm_cffi.constants`) as ``#define``s, every exported function, the inline
initializers (:mod:`.c_initializers`) and, in a separate section, the emulator's own functions.
``include/hccl/hccl.h``, ``include/hcomm/hcomm_primitives.h``, ``include/acl/acl.h``, ... (every header
the cdef names) include it, so code written for CANN's include paths compiles unchanged.
"""
from __future__ import annotations

import os
import re
from typing import Dict, Tuple

from .. import constants
from .. import acl_codes
from .acl_rt_exports import ACL_PROF_MACROS, ACL_RT_MACROS
from ..enums import HCCL_ROOT_INFO_BYTES
from ..files import write_atomically
from .c_initializers import initializers_source
from .declarations import Prototype, exported, prototypes, types_cdef
from .vendor_stubs import RES_EXPT_HEADER, RES_EXPT_PRELUDE, VENDOR_STUBS

__all__ = ["HEADER_NAME", "EMULATOR_FUNCTIONS", "VENDOR_SIGNATURES", "header_text", "write_headers",
           "vendor_headers"]

HEADER_NAME = "hcomm_sim.h"

#: Functions the emulated libraries add (exported by libhcomm.so); CANN has none of them.
EMULATOR_FUNCTIONS: Tuple[Prototype, ...] = (
    Prototype("HcclResult", "HcommSimBootstrapRootInfo", "uint32_t rank, uint32_t nRanks, HcclRootInfo* rootInfo",
              "hcomm_sim.h"),
    # custom operators: what `hcomm sim build-ops` turns an ASC source's kernel<<<blockDim, l2ctrl, stream>>>(args,
    # size) launch of an AICPU kernel into (sim/aicpu.py); errors are kept for aclrtGetLastError
    Prototype("aclError", "HcommSimAscLaunchAicpu", "void* fn, const char* name, uint32_t blockDim, aclrtStream stream, "
              "const void* args, size_t argsSize", "hcomm_sim.h"),
)

#: Where the vendor header's parameters differ from the cdef's: name -> (vendor parameters, forwarded arguments).
#: cffi cannot pass a union by value, so the cdef declares HcclSetConfig's HcclConfigValue as int32_t
#: (same calling convention: a one-int union is passed in an integer register).
VENDOR_SIGNATURES: Dict[str, Tuple[str, str]] = {
    "HcclSetConfig": ("HcclConfig config, HcclConfigValue configValue", "config, configValue.value"),
}

# The cdef spells out netinet/in.h's types (cffi has no system headers); C programs get the real ones.
_IN_ADDR_DEFINITIONS = re.compile(
    r"^typedef uint32_t in_addr_t;\n|^struct in_addr \{[^\n]*\};\n|^struct in6_addr \{[^\n]*\};\n", re.M)
_EXTRA_VENDOR_HEADERS = ("acl/acl.h", "acl/acl_base.h", "acl/error_codes/rt_error_codes.h", "hccl/hccl_types.h",
                         "hcomm/hcomm_res_defs.h", "hcomm/hcomm_team.h", "hcomm/hcomm_team_defs.h",
                         "hccl/hccl_res_expt.h", "hccl/hccl_diag.h", "hccl/hcomm_diag.h",
                         "ccu/ccu_res.h", "ccu/ccu_launch.h", "ccu/ccu_types.h", "ccu/ccu_res_defs.h")
#: CANN installs one directory of HCCL/HCOMM headers that programs reach as <hccl/X.h>, <hcomm/X.h> or <X.h>
#: (the vendor examples include <hccl/hcomm_primitives.h>, <hccl/hccl_res_expt.h>, <ccu/ccu_launch.h>, ...)
_HCCL_DIRECTORIES = ("hccl/", "hcomm/", "")


#: constants whose vendor type is not ``uint32_t`` (hcomm include/hccl/hccl_types.h); the rest are uint32_t
_CONSTANT_TYPES = {"HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET": "int32_t",
                   "HCCL_DEFAULT_SYMMETRIC_MEMORY_STRIDE": "uint64_t"}
#: macros in the vendor headers (not const objects): #define in C and C++
_VENDOR_MACROS = {"HCOMM_CHANNEL_DESC_ABI_V1_SIZE"}


def _constants() -> Dict[str, int]:
    out = {"HCCL_ROOT_INFO_BYTES": HCCL_ROOT_INFO_BYTES}
    out.update((name, getattr(constants, name)) for name in constants.__all__
               if isinstance(getattr(constants, name), int))
    return out


def _defines() -> str:
    """The headers' constants: C++ gets the vendor's ``static const`` objects (a client may declare the same
    names in its own namespace; a macro would break that), C gets macros (usable as array sizes and case labels)."""
    objects, macros = [], []
    for name, value in _constants().items():
        text = f"({value})" if value < 0 else (f"0x{value:X}U" if value > 0x7FFFFFFF or name.endswith("MAGIC_WORD")
                                                else str(value))
        if name in _VENDOR_MACROS:
            objects.append(f"#define {name} {text}")
            continue
        objects.append(f"static const {_CONSTANT_TYPES.get(name, 'uint32_t')} {name} = {text};")
        macros.append(f"#define {name} {text}")
    acl = [f"static const int {name} = {value};" for name, value in acl_codes.STATIC_CONST]
    acl_macros = [f"#define {name} {value}" for name, value in acl_codes.DEFINES + ACL_RT_MACROS + ACL_PROF_MACROS]
    return "\n".join(["#ifdef __cplusplus", *objects, "#else", *macros, "#endif", "",
                      "/* acl/acl_base_rt.h (static const int) and acl/error_codes/rt_error_codes.h (macros) */",
                      *acl, *acl_macros])


def vendor_declaration(proto: Prototype) -> str:
    """The declaration as the vendor header spells it."""
    params = VENDOR_SIGNATURES.get(proto.name, (proto.params or "void", ""))[0]
    return f"{proto.ret} {proto.name}({params});"


def header_text() -> str:
    """The text of include/hcomm_sim.h."""
    types = _IN_ADDR_DEFINITIONS.sub("", types_cdef())
    exported_names = {p.name for p in exported()}
    functions = []
    header = None
    for proto in prototypes():
        if proto.header != header:
            header = proto.header
            functions.append(f"/* {header} */")
        note = "" if proto.name in exported_names else "  /* device library only: not exported by the host libraries */"
        functions.append(vendor_declaration(proto) + note)
    emulator = "\n".join(vendor_declaration(p) for p in EMULATOR_FUNCTIONS)
    stubs = "\n".join(stub.declaration for stub in VENDOR_STUBS
                      if stub.declaration is not None and stub.header != RES_EXPT_HEADER)
    return f"""\
/* hcomm_sim.h: the CANN HCCL / HCOMM / ACL host API of the hcomm_cffi emulator.
 *
 * GENERATED by `hcomm sim build-libs` from hcomm_cffi's cdef (build_ffi.py), constants.py and
 * initializers.py; do not edit.  Link with -lhcomm -lhccl -lacl_rt (the libraries next to ../lib64).
 * See docs/guide/vendor-programs.md of hcomm_cffi.
 */
#ifndef HCOMM_SIM_H
#define HCOMM_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <netinet/in.h>
#include "securec.h"            /* as CANN's hcomm_res_defs.h includes it (libc_sec.so implements it) */

#ifdef __cplusplus
extern "C" {{
#endif

/* ======== types (the cdef of hcomm_cffi) ======== */
{types}
/* ======== constants (static const objects in C++ as in the vendor headers, macros in C) ======== */
{_defines()}

/* ======== functions (vendor names and types) ======== */
{chr(10).join(functions)}

/* ======== declared by the current vendor headers; the emulator exports them as stubs ========
 * Each returns HCCL_E_NOT_SUPPORT and names itself in aclGetRecentErrMsg() (docs/guide/vendor-programs.md).
 */
{stubs}

/* ======== static inline initializers (the same bytes as hcomm_cffi.initializers) ======== */
{initializers_source()}

/* ======== the emulator's own functions: NOT part of CANN ========
 * HcommSimBootstrapRootInfo(rank, nRanks, rootInfo): the root-info exchange of a job started by
 * `hcomm run` (or mpirun/torchrun, as hcomm_cffi.bootstrap detects them).  Rank 0 calls
 * HcclGetRootInfo (set a device first, as on CANN) and publishes the 4108 bytes; every rank returns
 * with them in *rootInfo.  Collective: every rank calls it once per communicator it creates.
 * Returns HCCL_SUCCESS, or HCCL_E_INTERNAL with the reason in aclGetRecentErrMsg() and on stderr.
 * On CANN, exchange the root info with MPI_Bcast or a file instead (docs/guide/vendor-programs.md).
 */
#define HCOMM_SIM 1
{emulator}

#ifdef __cplusplus
}}
#endif
#endif /* HCOMM_SIM_H */
"""


def vendor_headers() -> Tuple[str, ...]:
    """The vendor header paths (relative to include/) that forward to hcomm_sim.h."""
    named = {p.header for p in prototypes() if p.header and p.header != "hcomm_sim.h"} | set(_EXTRA_VENDOR_HEADERS)
    out = {rel for rel in named if rel.startswith(("acl/", "ccu/"))}
    for rel in named - out:
        out.update(directory + os.path.basename(rel) for directory in _HCCL_DIRECTORIES)
    return tuple(sorted(out))


def write_headers(include_dir: str) -> str:
    """Write hcomm_sim.h and the vendor-named forwarders into ``include_dir`` (a directory only this user can
    write, files.checked_dir); returns hcomm_sim.h's path."""
    main = write_atomically(os.path.join(include_dir, HEADER_NAME), header_text())
    for rel in vendor_headers():
        path = os.path.join(include_dir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomically(path, _res_expt_text(rel) if os.path.basename(rel) == os.path.basename(RES_EXPT_HEADER) else
                         f"/* {rel} of the hcomm_cffi emulated CANN install: everything is in hcomm_sim.h. */\n"
                         f'#include "{"../" * rel.count("/")}{HEADER_NAME}"\n')
    return main


def _res_expt_text(rel: str) -> str:
    """hccl_res_expt.h: the vendor's experimental resource calls (stubs here) with their callback type."""
    declarations = "\n".join(stub.declaration for stub in VENDOR_STUBS
                             if stub.header == RES_EXPT_HEADER and stub.declaration is not None)
    return (f"/* {rel} of the hcomm_cffi emulated CANN install: the emulator exports these as stubs returning\n"
            " * HCCL_E_NOT_SUPPORT (docs/guide/vendor-programs.md). */\n#ifndef HCOMM_SIM_HCCL_RES_EXPT_H\n"
            f'#define HCOMM_SIM_HCCL_RES_EXPT_H\n#include "{"../" * rel.count("/")}{HEADER_NAME}"\n'
            f'#ifdef __cplusplus\nextern "C" {{\n#endif\n{RES_EXPT_PRELUDE}\n{declarations}\n'
            "#ifdef __cplusplus\n}\n#endif\n#endif\n")
