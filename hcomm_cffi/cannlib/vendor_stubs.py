"""Host functions of the current vendor headers that the package's cdef lacks: exported as documented stubs.

Those of ``EMULATED`` are implemented (a C function of a SimLibrary part, declared in the core library
only); every other one returns ``HCCL_E_NOT_SUPPORT`` (5), as the vendor's own builds do on a product without the
feature, after naming itself in ``aclGetRecentErrMsg()``, so a C program that mentions one links and
a ``dlsym`` client finds it.  Declarations are the vendor's (hicann/hcomm include/hccl/hccl_comm.h,
hccl_sym_win.h, hccl_team.h; pkg_inc hccl/hccl_res_expt.h, which the vendor's custom-op samples
include); the CCU resource API (include/ccu/ccu_res.h, ccu_launch.h: Ascend 950 only, types of the
device DSL) is exported without a declaration in hcomm_sim.h.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from .declarations import Prototype

__all__ = ["VendorStub", "VENDOR_STUBS", "EMULATED", "RES_EXPT_HEADER", "RES_EXPT_PRELUDE", "NOT_SUPPORT"]

NOT_SUPPORT = 5                    # HCCL_E_NOT_SUPPORT
RES_EXPT_HEADER = "hccl/hccl_res_expt.h"
#: what hccl_res_expt.h declares besides its functions (its callback type)
RES_EXPT_PRELUDE = "typedef int32_t(Callback)(uint64_t, int32_t);"


@dataclass(frozen=True)
class VendorStub:
    """One stub: its name, the vendor header, the declaration (None: exported only) and the library."""

    name: str
    header: str
    declaration: Optional[str]
    library: str = "hcomm"
    emulated: bool = False          # the emulator implements it after all (a C function of a SimLibrary part)

    @property
    def returns(self) -> str:
        """The C return type (HcclResult unless the declaration says otherwise)."""
        if self.declaration is None:
            return "int32_t"
        return self.declaration.split(self.name)[0].strip()

    @property
    def params(self) -> str:
        """The parameter list as declared (``void`` when exported only)."""
        if self.declaration is None:
            return "void"
        return self.declaration.split(self.name, 1)[1].strip().rstrip(";").strip()[1:-1]

    @property
    def prototype(self) -> Prototype:
        """The function as a cdef Prototype (what the core's embedding API declares for an emulated one)."""
        return Prototype(self.returns, self.name, self.params, self.header)


#: functions of this list the emulator implements (the custom-op samples call them)
EMULATED = frozenset({"HcclThreadExportToCommEngine"})


def _declared(header: str, *declarations: str) -> Tuple[VendorStub, ...]:
    names = [d.split("(")[0].split()[-1] for d in declarations]
    return tuple(VendorStub(name, header, d, emulated=name in EMULATED) for name, d in zip(names, declarations))


_CCU_FUNCTIONS = (
    "HcommCcuCascCntAlloc", "HcommCcuCascCntGetMem", "HcommCcuEventAlloc", "HcommCcuEventGetAddr",
    "HcommCcuGetMemToken", "HcommCcuGetRmtMemToken", "HcommCcuGetTaskArgsNum", "HcommCcuInsCreate",
    "HcommCcuInsCreateDefault", "HcommCcuInsDestroy", "HcommCcuInsQueryResDesc", "HcommCcuInsResDescCreate",
    "HcommCcuInsResDescDestroy", "HcommCcuInsResDescQueryDieId", "HcommCcuInsResDescQueryNum",
    "HcommCcuInsResDescSetNum", "HcommCcuKernelLaunch", "HcommCcuKernelQueryResReq", "HcommCcuKernelRegister",
    "HcommCcuKernelRegisterEnd", "HcommCcuKernelRegisterStart", "HcommCcuQueryRemainResDesc",
    "HcommCcuVariableAlloc", "HcommCcuVariableGetAddr",
)

VENDOR_STUBS: Tuple[VendorStub, ...] = (
    _declared("hccl/hccl_comm.h",
              "HcclResult HcclGetRootInfoScalable(HcclRootInfo* rootInfo);",
              "HcclResult HcclCommInitRootInfoScalable(uint32_t nRanks, uint32_t nRoot, "
              "const HcclRootInfo* rootInfoList, uint32_t rank, uint32_t nExtRoot, const HcclCommConfig* config, "
              "HcclComm* comm);")
    + _declared("hccl/hccl_sym_win.h",
                "HcclResult HcclSymWinGetRemoteAddr(HcclCommSymWindow winHandle, size_t offset, uint32_t peerRank, "
                "void** ptr);")
    + _declared("hccl/hccl_team.h",
                "HcclResult HcclTeamCreate(HcclComm comm, const HcclTeamCreateDesc* desc, HcommTeamHandle* team);",
                "HcclResult HcclTeamGetLsaTeam(HcclComm comm, HcommTeamHandle* lsaTeam);",
                "HcclResult HcclTeamMemberToRank(HcclComm comm, HcommTeamHandle team, uint32_t memberId, "
                "uint32_t* rankId);",
                "HcclResult HcclTeamRankToMember(HcclComm comm, HcommTeamHandle team, uint32_t rankId, "
                "uint32_t* memberId);")
    + _declared(RES_EXPT_HEADER,
                "HcclResult HcclGetRemoteIpcHcclBuf(HcclComm comm, uint64_t remoteRank, void** addr, uint64_t* size);",
                "HcclResult HcclDevMemAcquire(HcclComm comm, const char* memTag, uint64_t* size, void** addr, "
                "bool* newCreated);",
                "HcclResult HcclThreadExportToCommEngine(HcclComm comm, uint32_t threadNum, "
                "const ThreadHandle* threads, CommEngine dstCommEngine, ThreadHandle* exportedThreads);",
                "int32_t HcclTaskRegister(HcclComm comm, const char* msgTag, Callback cb);",
                "int32_t HcclTaskUnRegister(HcclComm comm, const char* msgTag);",
                "HcclResult HcclCommAddExchangeInfo(HcclComm comm, const void* data, uint32_t length);",
                "HcclResult HcclCommGetExchangeInfo(HcclComm comm, uint32_t remoteRank, uint32_t length, void* data, "
                "uint32_t* actualLength);",
                "HcclResult HcclCommResetExchangeInfo(HcclComm comm);")
    + tuple(VendorStub(name, "ccu/ccu_res.h", None) for name in _CCU_FUNCTIONS)
)
