"""hccl/hccl_rank_graph.h on the emulator: the one-host world's rank graph.

Each follows the vendor's hcomm source for its checks and return codes (cited per function); what the
emulator's one-host world cannot mean (network layers beyond the first, heterogeneous clusters) is
answered as a single-server communicator would answer it.
"""
from __future__ import annotations

from typing import Any, List, Tuple

from .._ffi import ffi
from .errors import HcclResult, SimError, entry
from . import product
from .part import Part, check_out

__all__ = ["HcclRankGraphCalls"]

_COMM_TOPO_1DMESH = 1
_COMM_LINK_MAGIC_WORD = 0x0F0E0F0F        # hccl/hccl_rank_graph.h
_COMM_ADDR_TYPE_ID = 2
_ENDPOINT_LOC_TYPE_DEVICE = 0
_HCCL_HETEROG_MODE_HOMOGENEOUS = 0


class HcclRankGraphCalls(Part):
    """HcclRankGraphGet* and HcclGetHeterogMode."""

    HEADERS = ("hccl/hccl_rank_graph.h",)

    # ------------------------------------------------------------------ rank graph: one server, one layer
    # On one host every rank is in network layer 0, one topology instance of the 1D-mesh type (the
    # server's HCCS mesh); hcomm's rank-graph queries answer from the cluster's rank table the same way
    # for a single server.  Returned arrays belong to the communicator (valid until HcclCommDestroy).
    def _graph(self, comm: Any, layer: int) -> Any:
        c = self.state.comm(comm)
        if layer != 0:
            raise SimError(HcclResult.E_PARA, f"netLayer={layer}; this communicator has one network layer (0)")
        return c

    def _answer(self, c: Any, values: List[int], out: Any, count: Any, names: Tuple[str, str]) -> int:
        """``*out`` = an array of ``values`` the communicator keeps, ``*count`` = its length."""
        check_out(out, names[0])
        check_out(count, names[1])
        key = f"{names[0]} {values}"
        array = c.rank_graph.get(key)
        if array is None:
            array = c.rank_graph[key] = ffi.new("uint32_t[]", values)
        out[0] = array
        count[0] = len(values)
        return 0

    def _topology(self, comm: Any, layer: int, topoType: Any, inst: int = 0) -> int:
        self._graph(comm, layer)
        if inst != 0:
            raise SimError(HcclResult.E_PARA, f"topoInstId={inst}; layer 0 has one topology instance (0)")
        check_out(topoType, "topoType")
        topoType[0] = _COMM_TOPO_1DMESH
        return 0

    @entry
    def HcclRankGraphGetLayers(self, comm: Any, netLayers: Any, netLayerNum: Any) -> int:
        return self._answer(self.state.comm(comm), [0], netLayers, netLayerNum, ("netLayers", "netLayerNum"))

    @entry
    def HcclRankGraphGetRanksByLayer(self, comm: Any, netLayer: int, ranks: Any, rankNum: Any) -> int:
        c = self._graph(comm, netLayer)
        return self._answer(c, list(range(c.nranks)), ranks, rankNum, ("ranks", "rankNum"))

    @entry
    def HcclRankGraphGetRankSizeByLayer(self, comm: Any, netLayer: int, rankNum: Any) -> int:
        c = self._graph(comm, netLayer)
        check_out(rankNum, "rankNum")
        rankNum[0] = c.nranks
        return 0

    @entry
    def HcclRankGraphGetTopoTypeByLayer(self, comm: Any, netLayer: int, topoType: Any) -> int:
        return self._topology(comm, netLayer, topoType)

    @entry
    def HcclRankGraphGetInstSizeListByLayer(self, comm: Any, netLayer: int, instSizeList: Any, listSize: Any) -> int:
        c = self._graph(comm, netLayer)
        return self._answer(c, [c.nranks], instSizeList, listSize, ("instSizeList", "listSize"))

    @entry
    def HcclRankGraphGetTopoInstsByLayer(self, comm: Any, netLayer: int, topoInsts: Any, topoInstNum: Any) -> int:
        return self._answer(self._graph(comm, netLayer), [0], topoInsts, topoInstNum, ("topoInsts", "topoInstNum"))

    @entry
    def HcclRankGraphGetTopoType(self, comm: Any, netLayer: int, topoInstId: int, topoType: Any) -> int:
        return self._topology(comm, netLayer, topoType, topoInstId)

    @entry
    def HcclRankGraphGetRanksByTopoInst(self, comm: Any, netLayer: int, topoInstId: int, ranks: Any,
                                        rankNum: Any) -> int:
        c = self._graph(comm, netLayer)
        if topoInstId != 0:
            raise SimError(HcclResult.E_PARA, f"topoInstId={topoInstId}; layer 0 has one topology instance (0)")
        return self._answer(c, list(range(c.nranks)), ranks, rankNum, ("ranks", "rankNum"))

    @entry
    def HcclRankGraphGetLinks(self, comm: Any, netLayer: int, srcRank: int, dstRank: int, links: Any,
                              linkNum: Any) -> int:
        """One HCCS link, one hop, between two ranks of the server (the ranks' endpoints: device = rank)."""
        c = self._graph(comm, netLayer)
        check_out(links, "links")
        check_out(linkNum, "linkNum")
        for what, rank in (("srcRank", srcRank), ("dstRank", dstRank)):
            if not 0 <= rank < c.nranks:
                raise SimError(HcclResult.E_PARA, f"{what}={rank} is outside [0, {c.nranks})")
        if srcRank == dstRank:
            raise SimError(HcclResult.E_PARA, f"srcRank == dstRank == {srcRank}: a rank has no link to itself")
        key = f"links {srcRank} {dstRank}"
        link = c.rank_graph.get(key)
        if link is None:
            link = c.rank_graph[key] = ffi.new("CommLink[1]")
            link[0].header.version = 1                       # COMM_LINK_VERSION
            link[0].header.magicWord = _COMM_LINK_MAGIC_WORD
            link[0].header.size = ffi.sizeof("CommLink")
            for desc, rank in ((link[0].srcEndpointDesc, srcRank), (link[0].dstEndpointDesc, dstRank)):
                desc.protocol = product.link_protocol()
                desc.commAddr.type = _COMM_ADDR_TYPE_ID
                desc.commAddr.id = rank
                desc.loc.locType = _ENDPOINT_LOC_TYPE_DEVICE
                desc.loc.device.devPhyId = rank
            link[0].linkAttr.linkProtocol = product.link_protocol()
            link[0].linkAttr.hop = 1
        links[0] = link
        linkNum[0] = 1
        return 0

    @entry
    def HcclGetHeterogMode(self, comm: Any, mode: Any) -> int:
        self.state.comm(comm)
        check_out(mode, "mode")
        mode[0] = _HCCL_HETEROG_MODE_HOMOGENEOUS
        return 0
