"""PyTorch's own distributed test bodies pass on backend "hcomm" wherever they pass on gloo (tests/torch_suite.py).

One run of the selection on both backends (gloo is the reference, in the same run), plus the bodies guarded
for gloo that test generic behaviour, run on hcomm.  Every test gloo passes, hcomm passes, except the named
exceptions of the harness; nothing fails or hangs on either backend.  Run alone:
``python -m pytest -q -m slow tests/test_torch_suite.py`` (or ``python tests/torch_suite.py`` for the table).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("torch") is None or importlib.util.find_spec("expecttest")
                                 is None, reason="needs torch and expecttest (the test extras)")]

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import torch_suite  # noqa: E402


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> List[Dict[str, Any]]:
    out = tmp_path_factory.mktemp("suite") / "results.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(HERE / "torch_suite.py"), "--json", str(out)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads(out.read_text())["results"]


def _by(results: List[Dict[str, Any]], variant: str) -> Dict[tuple, Dict[str, Any]]:
    return {(r["test"], r["world_size"]): r for r in results if r["variant"] == variant}


def _show(r: Dict[str, Any]) -> str:
    return f"{r['variant']} {r['test']} (world size {r['world_size']}): {r['status']}\n{r.get('why', '')}\n" + \
        "\n".join(f"--- rank {k} output ---\n{v}" for k, v in (r.get("logs") or {}).items())


def test_nothing_fails_or_hangs(results) -> None:
    bad = [_show(r) for r in results if r["status"] in ("fail", "hang")]
    assert not bad, "\n\n".join(bad)


def test_gloo_passes_the_whole_selection(results) -> None:
    """The selection is what gloo passes: a gloo skip or failure means the selection (or torch) changed."""
    gloo = _by(results, "gloo")
    assert [k for k, r in gloo.items() if r["status"] != "pass"] == []
    assert len(gloo) == len(torch_suite.SELECTED) + sum(len(names) for _, names in torch_suite.WIDE)


def test_hcomm_passes_what_gloo_passes_but_the_named_exceptions(results) -> None:
    """Under hcomm's own guards, or under gloo's for the bodies guarded for gloo; exceptions are not run."""
    gloo, hcomm, guarded = _by(results, "gloo"), _by(results, "hcomm"), _by(results, "hcomm-as-gloo")
    missing = []
    for key, r in gloo.items():
        if r["status"] != "pass" or key[0] in torch_suite.EXCEPTIONS:
            continue
        mine = guarded.get(key) if key[0] in torch_suite.GLOO_GUARDED else hcomm.get(key)
        if mine is None or mine["status"] != "pass":
            missing.append(_show(mine) if mine is not None else f"{key}: not run on hcomm")
    assert not missing, "\n\n".join(missing)


def test_gloo_guarded_bodies_pass_on_hcomm(results) -> None:
    guarded = _by(results, "hcomm-as-gloo")
    assert {t for t, _ in guarded} == set(torch_suite.GLOO_GUARDED)
    assert [_show(r) for r in guarded.values() if r["status"] != "pass"] == []


def test_every_exception_names_its_reason() -> None:
    assert all(len(why) > 20 for why in torch_suite.EXCEPTIONS.values())
    assert set(torch_suite.EXCEPTIONS) <= set(torch_suite.SELECTED) | {t for _, ts in torch_suite.WIDE for t in ts}
