"""The platform the emulator stands for (``HCOMM_SIM_PLATFORM``): its SoC name and the protocol of its links.

Clients branch on ``aclrtGetSocName()``: custom operators (hicann/hccl@09300b70 examples/04_custom_ops_p2p/
op_host/utils.cc:14-40 GetDeviceType: "Ascend910B" A2, "Ascend910_93" A3, "Ascend950" by prefix), hccl_test
(hicann/oam-tools src/hccl_test/common/src/hccl_test_common.cc: 910B overflow mode, Ascend950 options) and
hcomm's ranktable example.  So the name is one CANN's own tables know, not a decorated string:
Ascend910B1 and Ascend910A (hicann/hcomm@8958adbf test/legacy/st/algorithm/utils/adapter_v2/adapter_rts/
adapter_rts_stub.cc:26-35), Ascend910_9391 (an A3 SoC hccl_test lists), Ascend950PR_9599 (hicann/runtime@681ef761
scripts/package/module/ascend/RuntimeInc.xml:270).  On an Ascend 950 channels take their protocol from the rank
graph's links (utils.cc:53, COMM_PROTOCOL_UB_CTP).  The data plane stays the A2/A3 host build's either way:
only the name, the links and the channel protocols they lead to change.
"""
from __future__ import annotations

from typing import Dict, FrozenSet

from .. import settings
from ..enums import Protocol

__all__ = ["SOC_NAMES", "platform", "soc_name", "link_protocol", "extra_channel_protocols"]

SOC_NAMES: Dict[str, str] = {"a2": "Ascend910B1", "a3": "Ascend910_9391", "910a": "Ascend910A",
                             "950": "Ascend950PR_9599"}


def platform() -> str:
    """The emulated platform: a2, a3, 910a or 950."""
    return str(settings.value("HCOMM_SIM_PLATFORM"))


def soc_name() -> str:
    """What aclrtGetSocName returns."""
    return SOC_NAMES[platform()]


def link_protocol() -> int:
    """The protocol of the one link between two ranks (HcclRankGraphGetLinks): UB_CTP on a 950, HCCS before."""
    return int(Protocol.UB_CTP) if platform() == "950" else int(Protocol.HCCS)


def extra_channel_protocols() -> FrozenSet[int]:
    """Channel protocols the product accepts beyond the A2/A3 set: the 950's UB links."""
    return frozenset({int(Protocol.UB_CTP)}) if platform() == "950" else frozenset()
