"""Show readers which code blocks the test suite does not run.

A page marks such a block with ``<!-- example: skip: REASON -->`` on the line before it (tests/docexamples.py
reads the same marks and runs every other block).  On GitHub the comment is invisible; in the manual this
transform puts the reason under the block, so a reader knows the block was not executed and why.
"""
from __future__ import annotations

import re
from typing import Any, Dict

from docutils import nodes
from sphinx.transforms import SphinxTransform

_SKIP = re.compile(r"<!--\s*example:\s*skip:\s*(.*?)\s*-->", re.S)


class ExampleSkipNotes(SphinxTransform):
    default_priority = 500

    def apply(self, **kwargs: Any) -> None:
        for raw in list(self.document.findall(nodes.raw)):
            m = _SKIP.search(raw.astext())
            if not m:
                continue
            block = raw.next_node(nodes.literal_block, siblings=True, descend=False)
            if block is None:
                continue
            note = nodes.paragraph(classes=["example-not-run"])
            note += nodes.emphasis(text=f"Not run by the test suite: {m.group(1)}.")
            block.parent.insert(block.parent.index(block) + 1, note)


def setup(app: Any) -> Dict[str, Any]:
    app.add_transform(ExampleSkipNotes)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
