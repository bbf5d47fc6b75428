"""The product the emulator stands for (``HCOMM_SIM_SOC``): its SoC name and the protocol of its links.

Custom operators branch on ``aclrtGetSocName()`` (hicann/hccl@09300b70 examples/04_custom_ops_p2p/op_host/
utils.cc:14 GetDeviceType: "Ascend910B" A2, "Ascend910_93" A3, "Ascend950" A5) and on an Ascend 950 take their
channels' protocol from the rank graph's links (utils.cc:53, COMM_PROTOCOL_UB_CTP).  The data plane stays the
A2/A3 host build's either way: only the name, the links and the channel protocols they lead to change.
"""
from __future__ import annotations

from typing import FrozenSet

from .. import settings
from ..enums import Protocol

__all__ = ["soc_name", "link_protocol", "extra_channel_protocols"]


def _soc() -> str:
    return str(settings.value("HCOMM_SIM_SOC"))


def soc_name() -> str:
    """What aclrtGetSocName returns: the SoC, marked as the emulator's."""
    return f"{_soc()} (hcomm_cffi emulator)"


def link_protocol() -> int:
    """The protocol of the one link between two ranks (HcclRankGraphGetLinks): UB_CTP on a 950, HCCS before."""
    return int(Protocol.UB_CTP) if _soc() == "Ascend950" else int(Protocol.HCCS)


def extra_channel_protocols() -> FrozenSet[int]:
    """Channel protocols the product accepts beyond the A2/A3 set: the 950's UB links."""
    return frozenset({int(Protocol.UB_CTP)}) if _soc() == "Ascend950" else frozenset()
