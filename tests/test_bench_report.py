"""hcomm bench: cross-rank combination, table, JSON/CSV round trip, plot, progress relay (in process)."""
from __future__ import annotations

import io
import json
import sys
from typing import List, Optional

import numpy as np
import pytest

from hcomm_cffi.bench import report
from hcomm_cffi.bench.check import fill, pattern
from hcomm_cffi.bench.ops import Ops, Prepared
from hcomm_cffi.bench.plot import PlotUnavailable, plot_series, points_of, require_matplotlib
from hcomm_cffi.bench.progress import MARKER, Bar, Relay, marker_line
from hcomm_cffi.bench.runner import BenchConfig, SizeResult, run_sweep
from hcomm_cffi.bench.sizes import Layout
from hcomm_cffi.enums import DataType, ReduceOp


class _Prep(Prepared):
    def __init__(self, out: np.ndarray) -> None:
        self.out, self.launches = out, 0

    def launch(self) -> None:
        self.launches += 1

    def wait(self) -> None:
        pass

    def output(self) -> Optional[np.ndarray]:
        return self.out

    def close(self) -> None:
        pass


class FakeOps(Ops):
    """Rank 0 of 3: outputs the correct pattern (or a damaged one); the other ranks' numbers are injected."""

    path = "fake"
    algorithm = "native"

    def __init__(self, others: List[List[int]], damage: int = 0) -> None:
        self.rank, self.size = 0, 3
        self.others, self.damage = others, damage
        self.preps: List[_Prep] = []
        self.barriers = 0

    def prepare(self, lay: Layout, dtype: DataType, op: ReduceOp, root: int, host_input: np.ndarray,
                average: bool = False) -> Prepared:
        pat = pattern(lay, dtype, op, self.rank, self.size, root)
        out = fill(pat.expected or (), lay.recv_count or lay.send_count, dtype)
        out[:self.damage] += 1
        self.preps.append(_Prep(out))
        return self.preps[-1]

    def barrier(self) -> None:
        self.barriers += 1

    def allgather_int64(self, values) -> np.ndarray:
        return np.array([list(values)] + self.others, np.int64)

    def describe(self):
        return {"path": self.path}

    def close(self) -> None:
        pass


def _cfg(**kw) -> BenchConfig:
    base = dict(op="allreduce", sizes=(8, 1024), iters=4, warmup=2)
    base.update(kw)
    return BenchConfig(**base)


def test_slowest_rank_and_worst_wrong_count_win() -> None:
    ops = FakeOps(others=[[8_000_000, 0], [4_000, 7]])   # rank 1: 8 ms for 4 iterations; rank 2: 7 wrong
    results = run_sweep(ops, _cfg())
    assert [r.size for r in results] == [8, 1024]
    for r in results:
        assert r.time_us == pytest.approx(2000.0)                 # 8 ms / 4 iterations, the max
        assert r.wrong == 7 and r.wrong_ranks[1:] == [0, 7]
        assert r.algbw == pytest.approx(r.size / 2000.0 / 1e3)
        assert r.busbw == pytest.approx(r.algbw * 4 / 3)          # 2(n-1)/n, n = 3
        assert r.check == "on"
    assert all(p.launches == 6 for p in ops.preps)                # warm-up + timed
    assert ops.barriers == 2


def test_own_damage_is_counted() -> None:
    results = run_sweep(FakeOps(others=[[1, 0], [1, 0]], damage=3), _cfg(sizes=(64,)))
    assert results[0].wrong == 3 and results[0].wrong_ranks[0] == 3


def test_check_off_and_disabled() -> None:
    off = run_sweep(FakeOps(others=[[1, -1], [1, -1]]), _cfg(check=False))
    assert all(r.wrong is None and r.check == "off" for r in off)
    dis = run_sweep(FakeOps(others=[[1, -1], [1, -1]]), _cfg(op="barrier"))
    assert len(dis) == 1 and dis[0].size == 0 and dis[0].wrong is None and dis[0].busbw is None
    assert dis[0].check == "disabled" and "no data" in dis[0].check_reason


def test_non_root_ranks_do_not_vote() -> None:
    # reduce on root 1: rank 0 checks nothing (-1); rank 1 reports 4 wrong, rank 2 nothing
    res = run_sweep(FakeOps(others=[[10, 4], [10, -1]]), _cfg(op="reduce", root=1, sizes=(64,)))
    assert res[0].wrong == 4 and res[0].wrong_ranks == [-1, 4, -1]


def test_config_validation() -> None:
    for kw, match in ((dict(iters=0), "iters"), (dict(warmup=-1), "warmup"), (dict(op="broadcast", root=3), "root"),
                      (dict(op="nope"), "--op"), (dict(sizes=()), "no sizes")):
        with pytest.raises(ValueError, match=match):
            _cfg(**kw).validate(3)
    with pytest.raises(ValueError, match="at least 2 ranks"):
        _cfg(op="sendrecv").validate(1)


SIZES = (8, 4096, 1 << 20)


def _results() -> List[SizeResult]:
    return run_sweep(FakeOps(others=[[3000, 0], [5000, 0]]), _cfg(sizes=SIZES))


def test_table() -> None:
    cfg, res = _cfg(sizes=SIZES), _results()
    out = io.StringIO()
    report.print_table(cfg, res, 3, {"backend": "sim", "path": "fake"}, out)
    lines = out.getvalue().splitlines()
    rows = [line.split() for line in lines if not line.startswith("#")]
    assert len(rows) == 3
    assert rows[0][:5] == ["8", "2", "float", "sum", "-1"]
    assert float(rows[1][5]) == pytest.approx(res[1].time_us, abs=0.01)
    assert rows[2][-1] == "0"
    assert any("Wrong elements" in line and "OK" in line for line in lines)
    bc = report.format_row(_cfg(op="broadcast", root=2), res[0]).split()
    assert bc[3:5] == ["none", "2"]


def test_json_round_trip(tmp_path) -> None:
    cfg, res = _cfg(sizes=SIZES), _results()
    env = report.environment({"path": "fake"}, 3, {"hcomm_cffi": "0"}, {"HCCL_BUFFSIZE": "8"}, "sim")
    path = str(tmp_path / "r.json")
    report.write_json(path, cfg, 3, env, res)
    doc = report.read_json(path)
    assert doc["config"]["op"] == "allreduce" and doc["config"]["nranks"] == 3 and doc["config"]["sizes"] == [8, 4096, 1 << 20]
    assert doc["environment"]["variables"] == {"HCCL_BUFFSIZE": "8"} and doc["environment"]["backend"] == "sim"
    assert [SizeResult(**r) for r in doc["results"]] == res
    (tmp_path / "bad.json").write_text(json.dumps({"results": []}))
    with pytest.raises(ValueError, match="not an hcomm bench JSON"):
        report.read_json(str(tmp_path / "bad.json"))


def test_csv_round_trip(tmp_path) -> None:
    cfg, res = _cfg(sizes=SIZES), _results()
    env = {"backend": "sim", "path": "fake", "versions": {"hcomm_cffi": "0.1.0"}, "variables": {"HCOMM_SIM_CHECK": "off"}}
    path = str(tmp_path / "r.csv")
    report.write_csv(path, cfg, 3, env, res)
    rows = report.read_csv(path)
    assert len(rows) == 3
    for row, r in zip(rows, res):
        assert (row["op"], row["nranks"], row["dtype"], row["backend"], row["sim_check"]) == ("allreduce", 3, "fp32", "sim", "off")
        assert (row["size"], row["count"], row["wrong"]) == (r.size, r.count, r.wrong)
        assert row["time_us"] == r.time_us and row["busbw"] == r.busbw          # repr() round-trips floats
        assert row["time_us_ranks"] == r.time_us_ranks and row["wrong_ranks"] == r.wrong_ranks
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not an hcomm bench CSV"):
        report.read_csv(str(tmp_path / "bad.csv"))


def test_plot(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "p.png"
    res = _results()
    plot_series(str(path), {"native": points_of(res), "ring": points_of([r.to_dict() for r in res])}, "t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(PlotUnavailable, match="pip install matplotlib"):
        require_matplotlib()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_relay() -> None:
    err, out = _Tty(), io.StringIO()
    bar = Bar(err, interval=0.0)
    relay_out, relay_err = Relay(out, bar), Relay(err, bar)
    relay_err.write(marker_line(0, 2, 5, 10))
    assert "size 1/2" in err.getvalue() and "iter 5/10" in err.getvalue() and MARKER not in err.getvalue()
    relay_out.write("row 1\n")
    assert out.getvalue() == "row 1\n"
    assert "\r\x1b[K" in err.getvalue()                           # the bar was erased before the row
    relay_err.write("a warning\n")
    assert err.getvalue().count("a warning\n") == 1
    relay_err.write(marker_line(1, 2, 10, 10))
    relay_err.close()
    assert err.getvalue().endswith("\r\x1b[K")
    assert not hasattr(relay_out, "buffer")                       # the launcher must write text through us
