"""hcomm_cffi.settings: one parser and one error text for every HCCL_* / HCOMM_* variable."""
from __future__ import annotations

import dataclasses

import pytest

from hcomm_cffi import settings
from hcomm_cffi.settings import SettingsError


def test_defaults_when_unset_or_empty():
    s = settings.current({"HCCL_BUFFSIZE": "", "HCOMM_SIM_CHECK": "  "})
    assert s.buffsize_mb == 200 and s.exec_timeout_s == 1836.0 and s.connect_timeout_s == 120.0
    assert s.eager_limit == 64 << 10 and s.topology is None and s.sim_check == "warn"
    assert s.source("HCCL_BUFFSIZE") == "HCCL_BUFFSIZE default"


def test_read_at_call_time(monkeypatch):
    monkeypatch.setenv("HCOMM_EAGER_LIMIT", "100")
    assert settings.current().eager_limit == 100
    monkeypatch.setenv("HCOMM_EAGER_LIMIT", "200")
    assert settings.current().eager_limit == 200
    assert settings.current().source("HCOMM_EAGER_LIMIT") == "HCOMM_EAGER_LIMIT=200"


def test_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.current({}).buffsize_mb = 1  # type: ignore[misc]


def test_eager_limit_error_names_variable_value_and_expectation():
    with pytest.raises(SettingsError) as info:
        settings.current({"HCOMM_EAGER_LIMIT": "abc"})
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith("HCOMM_EAGER_LIMIT='abc' is not an integer number of bytes; expected ")


@pytest.mark.parametrize("raw,expected", [("0", 0), ("65536", 65536), ("64K", 65536), ("2m", 2 << 20),
                                          ("1GiB", 1 << 30)])
def test_size_suffixes(raw, expected):
    assert settings.value("HCOMM_EAGER_LIMIT", {"HCOMM_EAGER_LIMIT": raw}) == expected


def test_buffsize_vendor_range():
    assert settings.value("HCCL_BUFFSIZE", {"HCCL_BUFFSIZE": "1"}) == 1
    assert settings.value("HCCL_BUFFSIZE", {"HCCL_BUFFSIZE": "4294967295"}) == 4294967295
    for bad, what in [("0", "out of range"), ("4294967296", "out of range"), ("-1", "not an integer"),
                      ("1.5", "not an integer"), ("200M", "not an integer")]:
        with pytest.raises(SettingsError, match=f"HCCL_BUFFSIZE='{bad}' is {what}.*>= 1 and <= 4294967295"):
            settings.value("HCCL_BUFFSIZE", {"HCCL_BUFFSIZE": bad})


def test_exec_timeout_zero_means_never():
    s = settings.current({"HCCL_EXEC_TIMEOUT": "0"})
    assert s.exec_timeout_s == 0 and s.exec_wait_s == settings.EXEC_TIMEOUT_NEVER_S
    assert settings.current({"HCCL_EXEC_TIMEOUT": "2.25"}).exec_wait_s == 2.25
    for bad in ("-1", "1.234", "soon", "2147483648"):
        with pytest.raises(SettingsError, match=f"HCCL_EXEC_TIMEOUT='{bad}'"):
            settings.current({"HCCL_EXEC_TIMEOUT": bad})


def test_connect_timeout_must_be_positive():
    assert settings.value("HCCL_CONNECT_TIMEOUT", {"HCCL_CONNECT_TIMEOUT": "0.5"}) == 0.5
    with pytest.raises(SettingsError, match="HCCL_CONNECT_TIMEOUT='0' is out of range; expected .*> 0"):
        settings.value("HCCL_CONNECT_TIMEOUT", {"HCCL_CONNECT_TIMEOUT": "0"})


def test_enum_bool_shape_path():
    s = settings.current({"HCOMM_SIM_CHECK": "STRICT", "HCOMM_SIM_ABI_CHECK": "yes", "HCOMM_TOPOLOGY": "2x4",
                          "HCOMM_SIM_SHM_DIR": "rel/dir"})
    assert s.sim_check == "strict" and s.sim_abi_check is True and s.topology == (2, 4)
    assert s.sim_shm_dir.endswith("/rel/dir") and s.sim_shm_dir.startswith("/")
    with pytest.raises(SettingsError, match="HCOMM_SIM_CHECK='loud' is not a checker mode; expected one of off, warn"):
        settings.current({"HCOMM_SIM_CHECK": "loud"})
    with pytest.raises(SettingsError, match="HCOMM_SIM_ABI_CHECK='maybe' is not a boolean"):
        settings.current({"HCOMM_SIM_ABI_CHECK": "maybe"})
    with pytest.raises(SettingsError, match="HCOMM_TOPOLOGY='2x0' is not a topology shape"):
        settings.current({"HCOMM_TOPOLOGY": "2x0"})


def test_unknown_name():
    with pytest.raises(KeyError, match="HCOMM_NOPE"):
        settings.value("HCOMM_NOPE")


def test_every_field_has_one_variable():
    fields = {f.name for f in dataclasses.fields(settings.Settings)} - {"raw"}
    assert fields == {v.field for v in settings.VARIABLES}


# ---------------------------------------------------------------------------------------------- emulator
def _init_one_rank_error() -> str:
    from hcomm_cffi.binding import Binding
    from hcomm_cffi.errors import HcclError
    from hcomm_cffi.lib import load

    b = Binding(load("sim"))
    b.set_device(0)
    try:
        comm = b.comm_init_root_info(1, b.get_root_info(), 0)
    except HcclError as exc:
        return f"{type(exc).__name__}: {exc}"
    b.comm_destroy(comm)
    return "no error"


def test_emulator_rejects_bad_buffsize_by_name(monkeypatch):
    monkeypatch.setenv("HCCL_BUFFSIZE", "0")
    text = _init_one_rank_error()
    assert text.startswith("HcclParaError") and "HCCL_BUFFSIZE='0' is out of range" in text


def test_emulator_buffsize_too_big_for_the_machine_is_a_memory_error(monkeypatch):
    monkeypatch.setenv("HCCL_BUFFSIZE", "99999999")
    text = _init_one_rank_error()
    assert text.startswith("HcclMemoryError") and "lower HCCL_BUFFSIZE" in text and "OSError" not in text


def test_emulator_exec_timeout_zero_is_never(monkeypatch):
    from hcomm_cffi.sim.config import read_config

    monkeypatch.setenv("HCCL_EXEC_TIMEOUT", "0")
    assert read_config().exec_timeout_s == settings.EXEC_TIMEOUT_NEVER_S
    assert _init_one_rank_error() == "no error"


@pytest.mark.parametrize("name", ["HCCL_EXEC_TIMEOUT", "HCCL_CONNECT_TIMEOUT", "HCOMM_STUCK_REPORT_S",
                                  "HCOMM_EAGER_LIMIT", "HCOMM_TOPOLOGY", "HCCL_BUFFSIZE"])
def test_numbers_in_non_ascii_digits_are_refused(name: str) -> None:
    """'１２' (fullwidth) or '١٢' (Arabic-Indic) are digits to Python's float()/int()/\\d, not to the vendor's parser."""
    for raw in ("１２", "١٢", "1x２" if name == "HCOMM_TOPOLOGY" else "1_0"):
        with pytest.raises(SettingsError, match=f"{name}='{raw}' is not"):
            settings.value(name, {name: raw})
