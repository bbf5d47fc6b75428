"""The guide's "When a job hangs or fails" (docs/guide/failures.md) shows real output: run each command it lists and
find the lines it shows.  Also what the README says about the quickstart on one rank and the extras."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

from test_launch_helpers import start

pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parent.parent / "README.md"
PAGE = README.parent / "docs" / "guide" / "failures.md"


def _blocks() -> List[Tuple[str, List[str]]]:
    """(command, lines shown) of every console block of the page."""
    section = PAGE.read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```console\n(.*?)```", section, re.S):
        lines = block.rstrip("\n").split("\n")
        assert lines[0].startswith("$ "), lines[0]
        found.append((lines[0][2:], lines[1:]))
    return found


def _normal(line: str) -> str:
    """A line with what changes from run to run replaced: times, pids, job ids, the temp directory, thread ids,
    where the package is installed, which rank happened to fail first, how many of the package's frames an
    error passed through."""
    line = re.sub(r"\S*/hcomm-\d+-flight-[0-9a-f]{12}-\w+", "DIR", line)
    line = re.sub(r"\b[0-9a-f]{12}\b", "JOB", line)
    line = re.sub(r"\bpid \d+", "pid N", line)
    line = re.sub(r"as of \d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "as of TIME", line)
    line = re.sub(r"\bthread 0x[0-9a-f]+", "thread 0xN", line)
    line = re.sub(r'File "\S*/hcomm_cffi/', 'File ".../hcomm_cffi/', line)
    line = re.sub(r"rank \d+ exited with code (\d+) first", r"rank N exited with code \1 first", line)
    line = re.sub(r"\d+ frames? inside hcomm_cffi", "N frames inside hcomm_cffi", line)
    line = re.sub(r"\b\d+(\.\d+)? s\b", "N s", line)
    return _bystanders(line)


#: how a rank that did not fail first ends: its own error (it saw the failed peer first) or the launcher's stop
BYSTANDER_END = re.compile(r"(raised \w+[;,] )?(exited with code 1|stopped by hcomm run \(SIGTERM\))")


def _bystanders(line: str) -> str:
    """``line`` with the endings of the ranks that did not fail first made one: which of a rank's own error exit and
    the launcher's SIGTERM comes first is a race the guide says it does not fix (in a rank's line of "where each rank
    is" and in the summary's "How the ranks ended: ..." clause, whose groups are regrouped by rank)."""
    if re.match(r"hcomm run: +rank \d+: ", line):
        return re.sub(r"(failed|running) for N s; " + BYSTANDER_END.pattern + "$", "ENDED", line)
    told = re.search(r"How the ranks ended: (.*?)\. Below", line)
    if told is None:
        return line
    ends = {}
    for group in told.group(1).split("; "):
        ranks, _, how = group.partition(": ")
        for r in re.findall(r"\d+(?:-\d+)?", ranks):
            lo, _, hi = r.partition("-")
            for rank in range(int(lo), int(hi or lo) + 1):
                ends[rank] = "ENDED" if BYSTANDER_END.fullmatch(how) else how
    merged = "; ".join(f"rank {r}: {how}" for r, how in sorted(ends.items()))
    return line[:told.start(1)] + merged + line[told.end(1):]


def _run(command: str, shm: str) -> List[str]:
    words = shlex.split(command)
    env = {"HCOMM_SIM_SHM_DIR": shm, "OMP_NUM_THREADS": "1"}
    while "=" in words[0]:
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    argv = [sys.executable if w == "python" else w for w in words]
    assert argv[0] == "hcomm", command
    proc = start([sys.executable, "-m", "hcomm_cffi", *argv[1:]], env)
    out, err = proc.communicate(timeout=180)
    # the launcher's lines and the ranks' error output (each rank's whole: its order is fixed)
    lines = [line for line in err.splitlines() if line.startswith("hcomm run:") or re.match(r"\[\d+\] ", line)]
    for path in set(re.findall(r"hcomm doctor (\S+)", err)):
        shutil.rmtree(path, ignore_errors=True)
    return lines


def test_the_section_lists_the_four_scenarios():
    blocks = _blocks()
    assert [c.split()[-1] for c, _ in blocks] == ["mismatch", "straggler", "absent", "killed"]
    absent = blocks[2][1]
    # the stuck rank's Python stack is part of what the README shows (and so of what the test checks)
    assert "hcomm run:   rank 1's Python stack, taken 0.1 s before this report (2 threads, most recent call last):" \
        in absent and "hcomm run:       hcomm_cffi/examples/failures.py:55 in main" in absent
    assert all(lines[-1].startswith("hcomm run: next step: ") or lines[-1] == "…" for _, lines in blocks)


@pytest.mark.parametrize("command,shown", _blocks(), ids=lambda v: v.split()[-1] if isinstance(v, str) else "")
def test_readme_output_is_what_the_command_prints(command, shown, shm):
    real = [_normal(line) for line in _run(command, shm)]
    at = 0
    for line in shown:
        if line == "…":
            continue
        want = _normal(line)
        assert want in real[at:], f"docs/guide/failures.md line not printed (in this order) by `{command}`:\n{line}\n\nprinted:\n" + \
            "\n".join(real)
        at = real.index(want, at) + 1


def test_quickstart_refuses_one_rank_as_the_readme_says(shm, tmp_path):
    """The README's quickstart needs two ranks (tests/test_docs_examples.py runs it on two and compares its output)."""
    text = README.read_text(encoding="utf-8")
    quick = text[text.index("## Quickstart"):]
    code = re.search(r"```python\n(.*?)```", quick, re.S).group(1)
    assert "It needs two ranks or more" in quick and "$ hcomm run -n 2 -- python quickstart.py" in quick
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    one = start([sys.executable, "-m", "hcomm_cffi", "run", "-n", "1", "--", sys.executable, str(script)],
                {"HCOMM_SIM_SHM_DIR": shm})
    out, err = one.communicate(timeout=120)
    assert one.returncode == 1 and "sending to oneself is not supported" in err, err      # what the README says


def test_readme_names_the_extra_of_each_optional_feature():
    text = README.read_text(encoding="utf-8")
    for extra, what in (("torch", "torch.distributed backend"), ("plot", "matplotlib"), ("mpi", "mpi4py"),
                        ("npu", "torch_npu")):
        assert re.search(rf'pip install "hcomm_cffi\[{extra}\]"\s+# .*{what}', text), extra
    assert "--index-url https://download.pytorch.org/whl/cpu" in text
    import tomllib
    extras = tomllib.loads((README.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"torch", "plot", "mpi", "npu"} <= set(extras)
