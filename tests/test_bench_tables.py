"""The manual's benchmark tables come from scripts/bench_tables.py (each with its command, date and machine);
none is written by hand."""
from __future__ import annotations

import datetime as dt
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guide" / "benchmarks.md"


def _script():
    spec = importlib.util.spec_from_file_location("bench_tables", ROOT / "scripts" / "bench_tables.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_included_table_was_written_by_the_script():
    bt = _script()
    included = re.findall(r"```\{include\} \.\./_bench/(\w+)\.md", PAGE.read_text(encoding="utf-8"))
    assert included, "the benchmarks page includes no generated table"
    for name in included:
        assert name in bt.BENCHMARKS, f"{name}: not a benchmark of scripts/bench_tables.py"
        text = (bt.OUT / f"{name}.md").read_text(encoding="utf-8")
        assert text.startswith(bt.MARK), f"docs/_bench/{name}.md was not written by scripts/bench_tables.py"
        header = text.split("\n\n", 2)[1]
        assert header.startswith(f"`{bt.BENCHMARKS[name].command}`: "), f"{name}: run with another command"
        assert re.search(r"Run on \d{4}-\d\d-\d\d \d\d:\d\d UTC on .+ usable core", header), f"{name}: no date/machine"


def test_no_table_is_typed_into_the_pages():
    """Benchmark figures live only in the generated files: the README and the benchmarks page hold no table."""
    for page in (ROOT / "README.md", PAGE):
        rows = [line for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("|")]
        assert not rows, f"{page.relative_to(ROOT)} has a table typed by hand: {rows[0]}"


def test_the_header_names_command_date_machine_and_commit():
    bt = _script()
    bench = bt.BENCHMARKS["bench_plan"]
    text = bt.render(bench, "result line\n", dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.timezone.utc),
                     "CPU X, 2 usable core(s)", "abc1234", 12.3)
    assert text.startswith(bt.MARK)
    assert f"`{bench.command}`: {bench.what}." in text
    assert "Run on 2026-01-02 03:04 UTC on CPU X, 2 usable core(s);" in text and "commit abc1234; it took 12 s." in text
    assert "```text\nresult line\n```" in text
    assert "usable core(s)" in bt.machine() and "load average" in bt.machine()
