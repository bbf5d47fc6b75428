"""Run the code blocks of the README and of the manual's guide pages, and compare the output a page shows.

Every fenced block of a page is one of these, chosen by the language and by an HTML comment on the line
before it (``<!-- example: ... -->``, invisible on GitHub and in the built manual):

- ``console``: each ``$ command`` runs (bash, in the page's working directory); the lines after it are the
  output the page shows, compared with what it prints (stdout and stderr together).  A line ``…`` stands for
  any number of lines; ``…`` inside a line for any text.  Lines of ``hcomm run``'s ranks (``[0] ...``) are
  compared rank by rank (the ranks' lines interleave differently from run to run).  ``exit=N``: the
  command's exit status (default 0).
- ``bash`` / ``sh``: run with ``bash -e``; the output is not compared.
- ``python``: run as a script (``run``, the default) or under ``hcomm run`` (``ranks=N``), or written to a
  file of the page's working directory that a later block runs (``file=NAME``).
- any block: ``skip: REASON`` (not executed: the reason is counted and shown), or ``by=tests/FILE.py`` (run
  and compared by that test, which names the page).  A block of another language must say one of these or
  ``file=NAME``.

Blocks run in page order, in one temporary directory per page; ``python`` and ``hcomm`` are this
interpreter and this checkout's package.  ``python tests/docexamples.py`` prints the counts of every page.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
#: the pages whose blocks are examples: the README, every page of the user guide and of the design notes
def pages() -> List[Path]:
    docs = ROOT / "docs"
    return [ROOT / "README.md", *sorted(docs.glob("guide/*.md")), *sorted(docs.glob("design/*.md"))]


ELLIPSIS = "…"
_MARK = re.compile(r"<!--\s*example:\s*(.*?)\s*-->\s*$")
_FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*(\S*)")   # indented too: a block inside a list item
#: directories of the checkout a page's commands may name by relative path (linked; examples/ is copied, since
#: a page builds in it)
_LINKED = ("benchmarks", "scripts", "hcomm_cffi", "tests")
_COPIED = ("examples",)


@dataclass
class Block:
    page: Path
    line: int                     # 1-based line of the opening fence
    lang: str
    text: str
    marks: Dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        name = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page.name
        return f"{name}:{self.line}"

    @property
    def skipped(self) -> Optional[str]:
        return self.marks.get("skip")


def _marks(comment: str) -> Dict[str, str]:
    """``skip: the reason`` or space-separated ``key=value`` / ``key`` words."""
    if comment.startswith("skip:"):
        return {"skip": comment[5:].strip()}
    out = {}
    for word in shlex.split(comment):
        key, _, value = word.partition("=")
        out[key] = value
    return out


def blocks(page: Path) -> List[Block]:
    """The fenced blocks of ``page`` with the marks of the comment right above each (blank lines between allowed)."""
    lines = page.read_text(encoding="utf-8").split("\n")
    found, i, pending = [], 0, None
    while i < len(lines):
        m = _FENCE.match(lines[i])
        mark = _MARK.match(lines[i].strip())
        if mark:
            pending = (i, _marks(mark.group(1)))
        elif m:
            indent, fence, lang, start = m.group(1), m.group(2), m.group(3).lower(), i
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith(indent + fence):
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            marks = pending[1] if pending else {}
            if lang.startswith("{"):       # a MyST directive (toctree, eval-rst, ...): not an example
                marks = {"directive": ""}
            found.append(Block(page, start + 1, lang, "\n".join(body) + "\n", marks))
            pending = None
        elif lines[i].strip() and pending is not None:
            raise ValueError(f"{page}:{pending[0] + 1}: an example mark must be followed by a code block")
        i += 1
    return [b for b in found if "directive" not in b.marks]


def check_marks(block: Block) -> None:
    """Every block says how it runs; nothing is silently left out."""
    known = {"skip", "by", "file", "run", "ranks", "exit", "timeout"}
    unknown = set(block.marks) - known
    if unknown:
        raise ValueError(f"{block.where}: unknown example mark(s) {sorted(unknown)}; known: {sorted(known)}")
    if block.skipped is not None and not block.skipped:
        raise ValueError(f"{block.where}: 'skip:' needs the reason the block is not executed")
    if "by" in block.marks:
        test = ROOT / block.marks["by"]
        name = block.where.rsplit(":", 1)[0]
        if not test.is_file() or name not in test.read_text(encoding="utf-8"):
            raise ValueError(f"{block.where}: by={block.marks['by']}: that test must exist and name {name}")
    if block.lang not in ("console", "bash", "sh", "python") and not ({"skip", "by", "file"} & set(block.marks)):
        raise ValueError(f"{block.where}: a ```{block.lang or '(no language)'} block must be marked "
                         f"<!-- example: skip: REASON -->, by=tests/FILE.py or file=NAME")


@dataclass
class Counts:
    executed: int = 0
    compared: int = 0             # console blocks whose output was compared
    by_other_tests: int = 0
    skipped: List[Tuple[str, str]] = field(default_factory=list)


def count(page: Path) -> Counts:
    c = Counts()
    found = blocks(page)
    for i, b in enumerate(found):
        check_marks(b)
        name = b.marks.get("file")
        if name and not any(name in later.text for later in found[i + 1:] if later.skipped is None):
            raise ValueError(f"{b.where}: file={name} is run by no later block of the page")
        if b.skipped is not None:
            c.skipped.append((b.where, b.skipped))
        elif "by" in b.marks:
            c.by_other_tests += 1
        else:
            c.executed += 1
            c.compared += b.lang == "console" and any(not l.startswith("$ ") for l in b.text.splitlines() if l)
    return c


class ExampleFailed(AssertionError):
    pass


def _bin_dir(work: Path) -> Path:
    """``python`` and ``hcomm`` as this interpreter and this checkout's package, first on PATH."""
    bindir = work / ".bin"
    bindir.mkdir()
    for name, body in (("python", f'exec {shlex.quote(sys.executable)} "$@"\n'),
                       ("hcomm", f'exec {shlex.quote(sys.executable)} -m hcomm_cffi "$@"\n')):
        path = bindir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bindir


def _env(work: Path, shm: str, home: Optional[Path]) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HCOMM_RUN_", "TORCHELASTIC_", "OMPI_", "PMI", "PYTEST_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    # what a user gets by default: the test suite's smaller HCCL buffer would change what the pages show
    env.pop("HCCL_BUFFSIZE", None)
    env["PATH"] = f"{_bin_dir(work)}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(work)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["HCOMM_SIM_SHM_DIR"] = shm
    if home is not None:
        env["HOME"] = str(home)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["COLUMNS"] = "120"
    return env


def _run(cmd: str, work: Path, env: Dict[str, str], timeout: float) -> Tuple[int, str]:
    proc = subprocess.run(["bash", "-e", "-c", cmd], cwd=work, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout, start_new_session=True)
    return proc.returncode, proc.stdout


def _groups(lines: List[str]) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    for line in lines:
        m = re.match(r"\[(\d+)\] ", line)
        out.setdefault(m.group(1) if m else "", []).append(line)
    return out


def _line_matches(shown: str, real: str) -> bool:
    if ELLIPSIS not in shown:
        return shown.rstrip() == real.rstrip()
    pattern = ".*".join(re.escape(part) for part in shown.rstrip().split(ELLIPSIS))
    return re.fullmatch(pattern, real.rstrip()) is not None


def compare(shown: List[str], real: List[str]) -> Optional[str]:
    """None when ``real`` is what ``shown`` shows, else what differs."""
    gaps = any(line.strip() == ELLIPSIS for line in shown)
    shown = [line for line in shown if line.strip() != ELLIPSIS]
    want, got = _groups(shown), _groups(real)
    for key in sorted(set(want) | (set() if gaps else set(got))):
        w, g, at = want.get(key, []), got.get(key, []), 0
        for line in w:
            while at < len(g) and not _line_matches(line, g[at]):
                if not gaps:
                    return f"expected {line!r}, got {g[at]!r}"
                at += 1
            if at == len(g):
                return f"line not printed (or not in this order): {line!r}"
            at += 1
        if not gaps and at != len(g):
            return f"printed lines the page does not show: {g[at:]}"
    return None


def _console(block: Block, work: Path, env: Dict[str, str], timeout: float) -> None:
    steps: List[Tuple[str, List[str]]] = []
    for line in block.text.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise ExampleFailed(f"{block.where}: a console block starts with '$ command', not {line!r}")
    for cmd, shown in steps:
        code, out = _run(cmd, work, env, timeout)
        want = int(block.marks.get("exit", "0") or 0)
        if code != want:
            raise ExampleFailed(f"{block.where}: `{cmd}` exited with {code} (the page expects {want}):\n{out}")
        problem = compare(shown, out.rstrip("\n").split("\n") if out.strip() else [])
        if problem:
            raise ExampleFailed(f"{block.where}: `{cmd}` printed what the page does not show: {problem}\n"
                                f"--- the page shows:\n" + "\n".join(shown) + f"\n--- it printed:\n{out}")


def run_block(block: Block, work: Path, env: Dict[str, str]) -> None:
    timeout = float(block.marks.get("timeout", "120") or 120)
    if "file" in block.marks:
        target = work / block.marks["file"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text)
        return
    if block.lang == "console":
        _console(block, work, env, timeout)
        return
    if block.lang in ("bash", "sh"):
        code, out = _run(block.text, work, env, timeout)
    else:
        script = work / f"_block_{block.line}.py"
        script.write_text(block.text)
        ranks = block.marks.get("ranks")
        launch = f"hcomm run -n {int(ranks)} -- python" if ranks else "python"
        code, out = _run(f"{launch} {shlex.quote(script.name)}", work, env, timeout)
    if code != int(block.marks.get("exit", "0") or 0):
        raise ExampleFailed(f"{block.where}: the {block.lang} block exited with {code}:\n{out}")


def needs_c_toolchain(page: Path) -> bool:
    """The page builds the emulated CANN install (its blocks then need a C compiler and the Python headers)."""
    return any("hcomm sim build-libs" in b.text for b in blocks(page) if b.skipped is None and "by" not in b.marks)


def run_page(page: Path, shm: str, home: Optional[Path] = None) -> Counts:
    """Run every block of ``page`` not skipped or left to another test; raise ExampleFailed at the first failure.

    ``home``: the HOME the blocks see (``~/...`` paths), e.g. one holding an emulated install built already.
    """
    counts = count(page)
    with tempfile.TemporaryDirectory(prefix="hcomm-docs-") as tmp:
        work = Path(tmp)
        for name in _LINKED:
            (work / name).symlink_to(ROOT / name)
        for name in _COPIED:
            shutil.copytree(ROOT / name, work / name)
        env = _env(work, shm, home)
        for block in blocks(page):
            if block.skipped is None and "by" not in block.marks:
                run_block(block, work, env)
    return counts


def main() -> int:
    if sys.argv[1:2] == ["--run"]:       # run the named pages' examples (a private HCOMM_SIM_SHM_DIR each)
        for name in sys.argv[2:]:
            with tempfile.TemporaryDirectory(prefix="hcomm-docs-shm-", dir="/dev/shm") as shm:
                c = run_page(Path(name).resolve(), shm)
            print(f"{name}: {c.executed} blocks ran")
        return 0
    total = Counts()
    for page in pages():
        c = count(page)
        print(f"{page.relative_to(ROOT)}: {c.executed} executed ({c.compared} with their output compared), "
              f"{c.by_other_tests} run by other tests, {len(c.skipped)} not executed")
        total.executed += c.executed
        total.compared += c.compared
        total.by_other_tests += c.by_other_tests
        total.skipped += c.skipped
    print(f"total: {total.executed} executed ({total.compared} compared), {total.by_other_tests} by other tests, "
          f"{len(total.skipped)} not executed:")
    for where, reason in total.skipped:
        print(f"  {where}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
