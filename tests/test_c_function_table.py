"""docs/C_FUNCTIONS.md is the emulated install's function table as the code has it now."""
from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "C_FUNCTIONS.md"


def test_the_function_table_is_current() -> None:
    from hcomm_cffi.cannlib.coverage import markdown

    assert DOC.read_text() == markdown(), "regenerate: python -m hcomm_cffi.cannlib.coverage > docs/C_FUNCTIONS.md"


def test_the_functions_real_clients_call_are_implemented() -> None:
    from hcomm_cffi.cannlib.coverage import IMPLEMENTED, function_table

    status = {row.name: row.status for row in function_table()}
    for name in ("HcclEngineCtxCreate", "HcclEngineCtxGet", "HcclEngineCtxCopy", "HcclEngineCtxDestroy",
                 "HcclGroupStart", "HcclGroupEnd", "HcclGroupStatusGet", "HcclCommGetHandleWithName",
                 "HcclGetConfig", "HcclSetConfig", "HcclThreadAcquireWithConfig", "HcclGetErrorString",
                 "HcclGetRootInfo", "HcclRankGraphGetLayers", "HcclRankGraphGetRanksByLayer"):
        assert status[name] == IMPLEMENTED, name
