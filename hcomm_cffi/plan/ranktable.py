"""Ranktable JSON (versions 1.0, 1.2, 2.0) -> :class:`Topology`, with the loader's rules checked.

Rules (hicann/hccl@09300b7:docs/zh/user_guide/cluster_info_config/, summed up in docs/design/plan-model.md):
status "completed"; rank ids 0..n-1, unique, contiguous per server; values are strings in 1.0/1.2 and integers in 2.0; device_ip required with more than one
server (1.0/1.2).  Every error names the field, the rank (or server) and the problem.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Set, Tuple

from ..enums import Protocol
from .topology import Topology

__all__ = ["RanktableError", "load_ranktable", "parse_ranktable", "SUPPORTED_VERSIONS"]

SUPPORTED_VERSIONS = ("1.0", "1.2", "2.0")


class RanktableError(ValueError):
    """A ranktable that HcclCommInitClusterInfo would reject; the message says where and why."""


def load_ranktable(path: "os.PathLike[str] | str") -> Topology:
    """Read and validate a ranktable file."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise RanktableError(f"ranktable {os.fspath(path)!r}: cannot read: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RanktableError(
            f"ranktable {os.fspath(path)!r}: not valid JSON at line {exc.lineno} column {exc.colno}: "
            f"{exc.msg} (comments copied from the docs are not JSON)") from None
    except RecursionError:
        raise RanktableError(f"ranktable {os.fspath(path)!r}: JSON nested too deeply to be a ranktable (a ranktable "
                             "is at most a few levels deep)") from None
    except ValueError as exc:              # a number of more digits than int() converts (sys.get_int_max_str_digits)
        raise RanktableError(f"ranktable {os.fspath(path)!r}: not a usable JSON document: {exc}") from None
    return parse_ranktable(data, source=os.fspath(path))


def parse_ranktable(data: Any, source: str = "ranktable") -> Topology:
    """Validate a decoded ranktable (a dict) and build its topology."""
    if not isinstance(data, dict):
        raise RanktableError(f"{source}: top level must be a JSON object, got {type(data).__name__}")
    version = data.get("version")
    if version not in SUPPORTED_VERSIONS:
        raise RanktableError(
            f"{source}: field 'version' is {version!r}; expected one of {', '.join(SUPPORTED_VERSIONS)}")
    status = data.get("status")
    if status != "completed":
        raise RanktableError(f"{source}: field 'status' is {status!r}; expected \"completed\"")
    if version == "2.0":
        return _parse_v2(data, source)
    return _parse_v1(data, version, source)


# -- shared helpers -----------------------------------------------------------------------
def _str_field(obj: Dict[str, Any], key: str, where: str, source: str,
               required: bool = True) -> Optional[str]:
    if key not in obj:
        if required:
            raise RanktableError(f"{source}: {where}: field '{key}' is missing")
        return None
    value = obj[key]
    if not isinstance(value, str):
        raise RanktableError(
            f"{source}: {where}: field '{key}' is {value!r} ({type(value).__name__}); "
            f"ranktable 1.0/1.2 values must be JSON strings")
    if value == "":
        raise RanktableError(f"{source}: {where}: field '{key}' is empty")
    return value


_INT_DIGITS = 18          # every number of a ranktable fits in a signed 64-bit integer


def _int_str(value: str, key: str, where: str, source: str) -> int:
    if not (value.isascii() and value.isdigit()):
        raise RanktableError(f"{source}: {where}: field '{key}' is {value!r}; expected a decimal integer")
    if len(value) > _INT_DIGITS:
        raise RanktableError(f"{source}: {where}: field '{key}' is a {len(value)}-digit number; expected at most "
                             f"{_INT_DIGITS} digits")
    return int(value)


def _int_field(obj: Dict[str, Any], key: str, where: str, source: str,
               required: bool = True) -> Optional[int]:
    if key not in obj:
        if required:
            raise RanktableError(f"{source}: {where}: field '{key}' is missing")
        return None
    value = obj[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RanktableError(
            f"{source}: {where}: field '{key}' is {value!r} ({type(value).__name__}); "
            f"ranktable 2.0 numbers must be JSON integers")
    if value < 0:
        raise RanktableError(f"{source}: {where}: field '{key}' is {value}; expected >= 0")
    return value


def _list_field(obj: Dict[str, Any], key: str, where: str, source: str) -> List[Any]:
    value = obj.get(key)
    if not isinstance(value, list) or not value:
        raise RanktableError(f"{source}: {where}: field '{key}' must be a non-empty list, got {value!r}")
    return value


def _check_rank_ids(groups: List[Tuple[str, List[int]]], source: str) -> Tuple[Tuple[int, ...], ...]:
    """Unique, 0..n-1, contiguous and ascending inside each server."""
    seen: Dict[int, str] = {}
    for name, ranks in groups:
        for r in ranks:
            if r in seen:
                raise RanktableError(
                    f"{source}: field 'rank_id': duplicate rank_id {r} (server {seen[r]!r} and server {name!r})")
            seen[r] = name
    n = len(seen)
    for r in sorted(seen):
        if r >= n:
            missing = sorted(set(range(n)) - set(seen))
            raise RanktableError(
                f"{source}: field 'rank_id': rank_id {r} on server {seen[r]!r} is out of range; rank ids must "
                f"be 0..{n - 1} (missing {missing[:8]})")
    for name, ranks in groups:
        ordered = sorted(ranks)
        if ordered != list(range(ordered[0], ordered[0] + len(ordered))):
            raise RanktableError(
                f"{source}: field 'rank_id': ranks of server {name!r} are {ordered}, not contiguous; "
                f"each server must hold consecutive rank ids")
    return tuple(tuple(sorted(r)) for _, r in groups)


# -- version 1.0 / 1.2 --------------------------------------------------------------------
def _parse_v1(data: Dict[str, Any], version: str, source: str) -> Topology:
    servers = _list_field(data, "server_list", "top level", source)
    count = _str_field(data, "server_count", "top level", source, required=(version == "1.0"))
    if count is not None and _int_str(count, "server_count", "top level", source) != len(servers):
        raise RanktableError(
            f"{source}: top level: field 'server_count' is {count!r} but server_list has {len(servers)} servers")
    multi = len(servers) > 1
    groups: List[Tuple[str, List[int]]] = []
    ids: List[str] = []
    seen: Set[str] = set()              # ids as a set: parsing stays linear in the number of servers
    for si, server in enumerate(servers):
        where = f"server_list[{si}]"
        if not isinstance(server, dict):
            raise RanktableError(f"{source}: {where}: must be an object")
        sid = _str_field(server, "server_id", where, source)
        assert sid is not None
        if len(sid) > 64:
            raise RanktableError(f"{source}: {where}: field 'server_id' is longer than 64 characters")
        if sid in seen:
            raise RanktableError(f"{source}: {where}: field 'server_id': duplicate server_id {sid!r}")
        ids.append(sid)
        seen.add(sid)
        ranks = [_parse_v1_device(dev, f"server {sid!r} device[{di}]", version, multi, source)
                 for di, dev in enumerate(_list_field(server, "device", f"server {sid!r}", source))]
        groups.append((sid, ranks))
    pods = _parse_super_pods(data, ids, seen, source) if version == "1.2" else ()
    rank_groups = _check_rank_ids(groups, source)
    n = sum(len(g) for g in rank_groups)
    return Topology(n, rank_groups, Protocol.HCCS, Protocol.ROCE, source=f"ranktable {version} {source}",
                    server_ids=tuple(ids), super_pods=pods)


def _parse_v1_device(dev: Any, where: str, version: str, multi: bool, source: str) -> int:
    if not isinstance(dev, dict):
        raise RanktableError(f"{source}: {where}: must be an object")
    rank_s = _str_field(dev, "rank_id", where, source)
    assert rank_s is not None
    rank = _int_str(rank_s, "rank_id", where, source)
    where = f"{where} (rank {rank})"
    _int_str(_str_field(dev, "device_id", where, source) or "", "device_id", where, source)
    if _str_field(dev, "device_ip", where, source, required=False) is None and multi:
        raise RanktableError(
            f"{source}: {where}: field 'device_ip' is missing; it is required when there is more than one server")
    for key in ("device_port", "host_port", "backup_device_port"):
        port = _str_field(dev, key, where, source, required=False)
        if port is not None and not 0 < _int_str(port, key, where, source) < 65536:
            raise RanktableError(f"{source}: {where}: field '{key}' is {port!r}; expected a port 1..65535")
    for key in ("host_ip", "backup_device_ip"):
        _str_field(dev, key, where, source, required=False)
    if version == "1.2":
        _str_field(dev, "super_device_id", where, source, required=False)
    return rank


def _parse_super_pods(data: Dict[str, Any], ids: List[str], known: Set[str], source: str) -> Tuple[str, ...]:
    """Super-pod id of every server (1.2); absent list = AI Server mode, present-but-empty = error."""
    if "super_pod_list" not in data:
        return ()
    pods = _list_field(data, "super_pod_list", "top level", source)
    owner: Dict[str, str] = {}
    for pi, pod in enumerate(pods):
        where = f"super_pod_list[{pi}]"
        pid = _str_field(pod, "super_pod_id", where, source)
        assert pid is not None
        for entry in _list_field(pod, "server_list", where, source):
            sid = _str_field(entry, "server_id", where, source)
            assert sid is not None
            if sid not in known:
                raise RanktableError(f"{source}: {where}: server_id {sid!r} is not in server_list")
            owner[sid] = pid
    unlisted = [s for s in ids if s not in owner]
    if unlisted:
        raise RanktableError(f"{source}: super_pod_list: servers {unlisted} belong to no super pod")
    return tuple(owner[s] for s in ids)


# -- version 2.0 --------------------------------------------------------------------------
def _parse_v2(data: Dict[str, Any], source: str) -> Topology:
    ranks = _list_field(data, "rank_list", "top level", source)
    count = _int_field(data, "rank_count", "top level", source)
    if count != len(ranks):
        raise RanktableError(
            f"{source}: top level: field 'rank_count' is {count} but rank_list has {len(ranks)} entries")
    by_server: Dict[str, List[int]] = {}
    for i, entry in enumerate(ranks):
        where = f"rank_list[{i}]"
        if not isinstance(entry, dict):
            raise RanktableError(f"{source}: {where}: must be an object")
        rank = _int_field(entry, "rank_id", where, source)
        where = f"{where} (rank {rank})"
        local = _int_field(entry, "local_id", where, source)
        if local is not None and local > 64:
            raise RanktableError(f"{source}: {where}: field 'local_id' is {local}; expected 0..64")
        _int_field(entry, "device_id", where, source)
        for key in ("device_port", "host_port"):
            _int_field(entry, key, where, source, required=False)
        by_server.setdefault(_v2_server(entry, where, source), []).append(rank)  # type: ignore[arg-type]
    groups = list(by_server.items())
    rank_groups = _check_rank_ids(groups, source)
    return Topology(len(ranks), rank_groups, Protocol.HCCS, Protocol.ROCE, source=f"ranktable 2.0 {source}",
                    server_ids=tuple(name for name, _ in groups))


def _v2_server(entry: Dict[str, Any], where: str, source: str) -> str:
    """Server key of a 2.0 rank: net_instance_id of its net_layer 0 level ("" = one server)."""
    levels = entry.get("level_list")
    if levels is None:
        return ""
    if not isinstance(levels, list):
        raise RanktableError(f"{source}: {where}: field 'level_list' must be a list")
    for li, level in enumerate(levels):
        lw = f"{where} level_list[{li}]"
        if not isinstance(level, dict):
            raise RanktableError(f"{source}: {lw}: must be an object")
        if _int_field(level, "net_layer", lw, source) == 0:
            inst = level.get("net_instance_id")
            if not isinstance(inst, str) or not inst:
                raise RanktableError(
                    f"{source}: {lw}: field 'net_instance_id' is {inst!r}; expected a non-empty string")
            return inst
    raise RanktableError(f"{source}: {where}: field 'level_list' has no entry with net_layer 0 (the server)")
