"""Sub-communicator creation compares the members' rank lists: a difference raises at once on the members, naming it."""
from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

import numpy as np

from hcomm_cffi.errors import HcclError
from multiproc import run_ranks

# A long connect timeout: a test that only passes because the exchange timed out would take 30 s
ENV = {"HCCL_CONNECT_TIMEOUT": "30"}


def create(rank: int, n: int, root_info: bytes, lists: Dict[int, Optional[List[int]]],
           names: Optional[Dict[int, str]] = None) -> Any:
    """Each rank creates Comm(name, ranks=lists[rank]) (None: skip); returns (ok, seconds, text, world usable)."""
    import hcomm_cffi as hcomm
    w = hcomm.init(rank=rank, world_size=n, root_info=root_info)
    ranks = lists.get(rank)
    if ranks is None or rank not in ranks:
        # listed by others but not creating the communicator: their lists may reach this rank unread,
        # which the strict checker reports at destroy (a notify recorded but never waited on)
        time.sleep(1.5)   # outlive the others' exchange (they must not wait for this rank to leave)
        try:
            hcomm.finalize()
        except HcclError as exc:
            assert "recorded but never waited on" in str(exc), exc
        return ("ok", 0.0, None, True)
    try:
        name = (names or {}).get(rank, "x")
        t0 = time.monotonic()
        try:
            sub = hcomm.Comm(name, ranks=ranks)
        except hcomm.CommError as exc:
            return ("error", round(time.monotonic() - t0, 2), f"{type(exc).__name__}: {exc}", w.broken is None)
        out = None
        if sub:
            out = int(sub.allreduce(np.array([rank + 1], np.int64))[0])
        sub.destroy()
        return ("ok", round(time.monotonic() - t0, 2), out, w.broken is None)
    finally:
        hcomm.finalize()


def test_different_order_raises_on_both_members_naming_the_lists() -> None:
    res = run_ranks(4, create, {0: [1, 3], 1: [3, 1], 2: [3, 1], 3: [1, 3]}, env=ENV, timeout=60)
    for r in (1, 3):
        kind, secs, text, usable = res[r]
        assert kind == "error" and secs < 5, res[r]
        assert text.startswith(f"MembershipError: rank {r} of communicator 'world': Comm('x', ranks="), text
        assert "rank 1 lists [3, 1]; rank 3 lists [1, 3]" in text, text
        assert "same ranks in the same order" in text
        assert usable, "every message was exchanged: the world stays usable"
    assert res[0][0] == res[2][0] == "ok"


def test_three_members_one_differs_every_member_raises() -> None:
    res = run_ranks(3, create, {0: [0, 1, 2], 1: [0, 1, 2], 2: [2, 1, 0]}, env=ENV, timeout=60)
    for r in range(3):
        kind, secs, text, _ = res[r]
        assert kind == "error" and secs < 5, res[r]
        # a member raises at the first list that differs from its own, so it may not have heard from everyone
        # yet: it names at least one other member's list beside rank 2's
        assert "ranks 0, 1 list [0, 1, 2]; rank 2 lists [2, 1, 0]" in text or any(
            f"rank {o} lists [0, 1, 2]; rank 2 lists [2, 1, 0]" in text for o in (0, 1)), text


def test_different_member_sets_are_named() -> None:
    """Rank 1 lists [0, 1], rank 0 lists [0, 1, 2]; rank 2 (listing [0, 1]) holds a null communicator."""
    res = run_ranks(3, create, {0: [0, 1, 2], 1: [0, 1], 2: [0, 1]}, env=ENV, timeout=60)
    kind, secs, text, usable = res[1]
    assert kind == "error" and secs < 5 and "rank 0 lists [0, 1, 2]; rank 1 lists [0, 1]" in text, res[1]
    assert usable
    kind, secs, text, usable = res[0]
    assert kind == "error" and secs < 5 and "rank 0 lists [0, 1, 2]; rank 1 lists [0, 1]" in text, res[0]
    assert "(no list from rank(s) 2 yet)" in text
    assert not usable, "rank 2 never received rank 0's list: the world's point-to-point is out of step"
    assert res[2][0] == "ok"


def test_different_names_are_named() -> None:
    res = run_ranks(2, create, {0: [0, 1], 1: [0, 1]}, {0: "a", 1: "b"}, env=ENV, timeout=60)
    for r in range(2):
        assert res[r][0] == "error", res[r]
        assert "rank 0 lists [0, 1] for 'a'; rank 1 lists [0, 1] for 'b'" in res[r][2]


def test_a_listed_rank_that_never_calls_is_named_after_the_connect_timeout() -> None:
    res = run_ranks(3, create, {0: [0, 1, 2], 1: [0, 1, 2], 2: None}, env={"HCCL_CONNECT_TIMEOUT": "1"},
                    timeout=60)
    for r in (0, 1):
        kind, secs, text, usable = res[r]
        assert kind == "error" and 0.9 < secs < 5, res[r]
        assert text.startswith(f"CommTimeoutError: rank {r} of communicator 'world': Comm('x', ranks=[0, 1, 2]): "
                               "rank(s) 2 did not send their rank list within 1 s (HCCL_CONNECT_TIMEOUT=1)"), text
        assert not usable


def test_matching_lists_still_work_and_cost_little() -> None:
    res = run_ranks(4, create, {r: [3, 1, 0, 2] for r in range(4)}, env=ENV, timeout=60)
    assert [r[0] for r in res] == ["ok"] * 4 and all(r[2] == 10 and r[3] for r in res), res


def test_message_round_trip_and_long_lists() -> None:
    from hcomm_cffi.api.membership import SHOWN_RANKS, decode, difference, encode

    msg = encode("pp", 2, [5, 4, 3])
    assert decode(msg)[:4] == ("pp", 2, (5, 4, 3), 3)
    long_a, long_b = list(range(100)), list(range(99, -1, -1))[::-1]
    long_b[99], long_b[98] = 98, 99   # differs only beyond the shown ranks: the checksum tells them apart
    text = difference(encode("x", 0, long_a), 0, {1: encode("x", 0, long_b)})
    assert text is not None and text.count(f", ... (100 ranks)]") == 2
    assert difference(encode("x", 0, long_a), 0, {1: encode("x", 0, long_a)}) is None
    assert len(decode(encode("x", 0, long_a))[2]) == SHOWN_RANKS


def test_longest_name_fits_the_message() -> None:
    from hcomm_cffi.api.membership import decode, encode

    name = "n" * 127   # the longest name Comm accepts
    assert decode(encode(name, 0, [0, 1]))[0] == name
