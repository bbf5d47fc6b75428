"""Every code block of the README and of the manual's guide and design pages runs (tests/docexamples.py), with the
output a page shows compared with what the command printed; a block that cannot run here says why."""
from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

import docexamples as dx
from cann_install import install  # noqa: F401  (a fixture: the emulated CANN install, built once per session)


@pytest.mark.parametrize("page", dx.pages(), ids=lambda p: str(p.relative_to(dx.ROOT)))
def test_every_block_says_how_it_runs(page):
    for block in dx.blocks(page):
        dx.check_marks(block)
        assert block.skipped is None or len(block.skipped) > 10, f"{block.where}: give the reason it is not run"


@pytest.mark.slow
@pytest.mark.parametrize("page", dx.pages(), ids=lambda p: str(p.relative_to(dx.ROOT)))
def test_page_examples_run(page, shm, request, tmp_path):
    if not dx.count(page).executed:
        pytest.skip(f"{page.name}: no block to run here")
    home = None
    if dx.needs_c_toolchain(page):
        install = request.getfixturevalue("install")      # built once per session (tests/cann_install.py)
        home = Path(install.root).parent                     # `--out ~/hcomm-cann` finds it up to date
    dx.run_page(page, shm, home)


def test_the_counts_cover_every_block():
    total = sum(len(dx.blocks(p)) for p in dx.pages())
    counts = [dx.count(p) for p in dx.pages()]
    executed = sum(c.executed for c in counts)
    assert executed + sum(c.by_other_tests for c in counts) + sum(len(c.skipped) for c in counts) == total
    assert executed >= 40, f"only {executed} blocks run"


def _page(tmp_path, text):
    page = tmp_path / "page.md"
    page.write_text(textwrap.dedent(text))
    return page


def test_a_wrong_output_fails(tmp_path, shm):
    page = _page(tmp_path, """\
        ```console
        $ echo hello
        goodbye
        ```
        """)
    with pytest.raises(dx.ExampleFailed, match="printed what the page does not show"):
        dx.run_page(page, shm)


@pytest.mark.slow
def test_a_failing_script_fails_and_a_broken_quickstart_is_caught(tmp_path, shm):
    """What happens when a README example stops working: its block fails, naming the page and line."""
    readme = dx.ROOT.joinpath("README.md").read_text(encoding="utf-8")
    good = "world.allreduce(x)                        # in place"
    broken = readme.replace(good, "world.allreduce(x, op='nope')  #", 1)
    assert broken != readme
    blocks = [b for b in dx.blocks(_page(tmp_path, broken)) if b.marks.get("file") == "quickstart.py"]
    assert len(blocks) == 1
    page = _page(tmp_path, "<!-- example: ranks=2 -->\n```python\n" + blocks[0].text + "```\n")
    with pytest.raises(dx.ExampleFailed, match=r"page.md:2: the python block exited with 1"):
        dx.run_page(page, shm)


def test_ellipsis_and_ranks():
    assert dx.compare(["[0] a", "[1] b"], ["[1] b", "[0] a"]) is None               # ranks interleave freely
    assert dx.compare(["x …", "…", "z"], ["x 1", "y", "z"]) is None
    assert dx.compare(["x"], ["x", "y"]) is not None                                   # an extra line, no …
    assert dx.compare(["a", "b"], ["b", "a"]) is not None                               # order within a rank


def test_an_unmarked_block_of_another_language_is_refused(tmp_path):
    page = _page(tmp_path, "```c\nint main(void) { return 0; }\n```\n")
    with pytest.raises(ValueError, match="must be marked"):
        dx.check_marks(dx.blocks(page)[0])


def test_the_two_commands_are_the_readme_s_and_ci_runs_the_second():
    readme = dx.ROOT.joinpath("README.md").read_text(encoding="utf-8")
    first = "pip install . && hcomm run -n 4 -- python -m hcomm_cffi.examples.allreduce"
    second = 'scripts/setup-test-env.sh && pip install -e ".[test]" && python -m pytest -q'
    section = readme[readme.index("## The two commands"):readme.index("## Quickstart")]
    assert f"```bash\n{first}\n```" in section and f"```bash\n{second}\n```" in section
    ci = dx.ROOT.joinpath(".ci", "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == second


def test_the_readme_is_at_most_200_lines():
    assert len(dx.ROOT.joinpath("README.md").read_text(encoding="utf-8").splitlines()) <= 200
