"""Each hook every operation needs has one call site on the launch path of api/ (issue 42), read from the source.

Every public call -- a collective blocking (fresh or its kept BoundCall), started, persistent, stream-ordered or
captured, a stream-ordered send/recv, a send/recv on a point-to-point lane -- is launched by
``Engine._launch`` (api/engine.py).  The hooks it needs are called there and nowhere else: the flight record and
trace entry (``observe.issue``), the device-memory declaration, the usability check, the order after captured
work, the failure of the communicator on a library error (``observe.fail``) and the interrupt guard
(``.interrupted``).  The sites that remain elsewhere are not launches, each named below with why.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Tuple

API = Path(__file__).resolve().parents[1] / "hcomm_cffi" / "api"

#: hook -> how its call is spelled (the attribute called)
HOOKS = {
    "observe": "observe.issue",
    "device memory": "device_memory.declare",
    "usable check": "check_usable",
    "ordered after captured work": "graphs.check_ordered",
    "fail on error": "observe.fail",
    "interrupt guard": "interrupted",
}

#: (file, function) sites of a hook that are not the launch of an operation, with why they stay
NOT_LAUNCHES: Dict[Tuple[str, str, str], str] = {
    # waits: an operation's completion, after its launch
    ("requests.py", "sync", "fail on error"): "the wait of a started operation (Pending: collectives, send/recv)",
    ("requests.py", "sync", "interrupt guard"): "the wait of a started operation (Pending)",
    ("point_to_point.py", "blocking", "interrupt guard"): "a blocking send/recv: the gap between its post and wait",
    ("average.py", "run", "interrupt guard"): "op='avg' async: the division attached to the request after its "
                                              "launch",
    ("engine.py", "start", "interrupt guard"): "a start's gap between its launch and the request it hands back (the "
                                              "call lock's release, the request's making)",
    ("engine.py", "_stream_waited", "fail on error"): "a user's Stream.synchronize() that failed",
    ("engine.py", "_stream_waited", "interrupt guard"): "a user's Stream.synchronize() interrupted",
    # an ACL graph's replay: one operation of each communicator it holds, launched by the graph
    ("graphs.py", "_opened_replays", "observe"): "a graph replay is an operation of each communicator it holds",
    ("graphs.py", "replay", "fail on error"): "a graph replay that failed to launch",
    ("graphs.py", "replay", "interrupt guard"): "a graph replay interrupted",
    ("graphs.py", "_close_opened", "fail on error"): "the wait of a graph's replays",
    ("graphs.py", "_close_opened", "interrupt guard"): "the wait of a graph's replays",
    # calls that are not operations: creation, inspection, destruction, binding a persistent request
    ("comm.py", "_check_usable", "usable check"): "Comm(), split(), comm_name, dump_flight_recorder: creations "
                                                  "and queries",
    ("op.py", "collective", "usable check"): "a collective's first check, before its arguments are validated "
                                             "(the engine checks again under the call lock)",
    ("op.py", "algorithm_call", "usable check"): "run_algorithm's first check, as a collective's",
    ("op.py", "lane_call", "usable check"): "a lane send/recv on a null communicator (it has no engine)",
    ("op.py", "stream_call", "usable check"): "a stream-ordered send/recv on a null communicator (no engine)",
    ("engine.py", "bind_persistent", "usable check"): "a persistent request's init binds, launches nothing",
    ("engine.py", "_bind_persistent", "fail on error"): "a persistent request's init binds, launches nothing",
    ("point_to_point.py", "irecv_any", "usable check"): "irecv_any watches the inboxes before it posts a receive",
    ("point_to_point.py", "announced", "usable check"): "irecv_any's look at the inboxes",
    ("point_to_point.py", "announced", "fail on error"): "irecv_any's look at the inboxes",
}


def hook_sites(path: Path) -> List[Tuple[str, str, int]]:
    """(hook, enclosing function, line) of every call of a hook in ``path``."""
    found: List[Tuple[str, str, int]] = []

    def visit(node: ast.AST, func: str) -> None:      # ``func``: the innermost function (a closure: its own name)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                spelled = ast.unparse(child.func)
                for hook, call in HOOKS.items():
                    if spelled == call or spelled.endswith("." + call):
                        found.append((hook, func, child.lineno))
            visit(child, child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func)
    visit(ast.parse(path.read_text(), str(path)), "")
    return found


def test_each_hook_has_one_call_site_on_the_launch_path() -> None:
    launch: Dict[str, List[str]] = {hook: [] for hook in HOOKS}
    unexplained: List[str] = []
    for path in sorted(API.glob("*.py")):
        for hook, func, line in hook_sites(path):
            if (path.name, func, hook) in NOT_LAUNCHES:
                continue
            site = f"{path.name}:{line} ({func})"
            if path.name == "engine.py" and func == "_launch" or (path.name, func) in (
                    ("engine.py", "_declare"), ("engine.py", "_failed")):
                launch[hook].append(site)
            else:
                unexplained.append(f"{hook}: {site}")
    assert not unexplained, "hook calls outside the engine's launch (route them through Engine._launch, or name " \
                            "them in NOT_LAUNCHES with why):\n" + "\n".join(unexplained)
    assert {hook: len(sites) for hook, sites in launch.items()} == {hook: 1 for hook in HOOKS}, launch


def test_not_launches_lists_only_sites_that_exist() -> None:
    """Every entry of NOT_LAUNCHES names a real call (the list shrinks with the code)."""
    seen = {(path.name, func, hook) for path in API.glob("*.py") for hook, func, _ in hook_sites(path)}
    assert not [key for key in NOT_LAUNCHES if key not in seen], [key for key in NOT_LAUNCHES if key not in seen]


def test_the_site_reader_sees_calls_by_hook_and_function(tmp_path: Path) -> None:
    """A guard: the reader finds each spelling, in the function that makes it."""
    sample = tmp_path / "sample.py"
    sample.write_text("def a(s):\n    s.check_usable('x')\n    observe.issue(s, 1, r)\n\n"
                      "def b(self):\n    self.state.interrupted('w', e)\n    self.device_memory.declare(buf)\n")
    assert hook_sites(sample) == [("usable check", "a", 2), ("observe", "a", 3), ("interrupt guard", "b", 6),
                                  ("device memory", "b", 7)]
