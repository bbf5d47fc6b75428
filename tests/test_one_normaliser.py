"""api/op.py is the one normaliser (issue 42): the modules that take a public call -- comm.py (the Comm's methods)
and point_to_point.py (the lanes that bind its send/recv) -- make no operation object and validate no buffer
themselves; they hand the Call op.py made to the engine.  Read from the source."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Tuple

API = Path(__file__).resolve().parents[1] / "hcomm_cffi" / "api"

#: what only op.py may call: the operation's constructor and the buffer and argument checks
NORMALISING = {"Call", "as_buffer", "key_of", "buffer_view", "rank_arg", "reduce_op", "parse_reduce_op",
               "check_algorithm", "new_like", "overlaps"}

#: (file, function, call) that stay outside op.py, with why
NOT_OPERATIONS: Dict[Tuple[str, str, str], str] = {
    ("point_to_point.py", "irecv_any", "as_buffer"): "irecv_any checks its buffer before it watches the inboxes "
                                                     "(the receive it posts then is a lane_call)",
    ("comm.py", "reduce", "rank_arg"): "op='avg': whether this rank divides (the sum is a reduce op.py makes)",
}


def normalising_calls(path: Path) -> List[Tuple[str, str, str]]:
    """(file, enclosing function, name) of every call of a normalising function in ``path``."""
    found: List[Tuple[str, str, str]] = []

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Call):
                f = child.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name in NORMALISING:
                    found.append((path.name, func, name))
            visit(child, child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func)
    visit(ast.parse(path.read_text(), str(path)), "")
    return found


def test_comm_and_the_lanes_only_hand_calls_made_by_op_to_the_engine() -> None:
    found = normalising_calls(API / "comm.py") + normalising_calls(API / "point_to_point.py")
    assert [site for site in found if site not in NOT_OPERATIONS] == []
    assert sorted(set(found)) == sorted(NOT_OPERATIONS), "NOT_OPERATIONS lists a site that is gone"


def test_op_makes_the_calls() -> None:
    assert {"Call", "as_buffer", "key_of", "rank_arg", "reduce_op", "check_algorithm"} <= \
        {name for _, _, name in normalising_calls(API / "op.py")}
