"""Sphinx configuration of the hcomm_cffi manual.

Why Sphinx + MyST + autodoc: the anchors this project follows (mpi4py, python-soundfile) document with
Sphinx, autodoc reads the package's own docstrings and type hints (no hand-copied signatures), MyST lets
the pages stay Markdown that GitHub renders too, and a small directive (``_ext/cli_reference.py``) renders
the CLI reference from the same argparse parsers ``hcomm`` runs (sphinx-argparse 0.6 fails on Sphinx 9).
Build: ``python -m sphinx -W -b html docs docs/_build/html`` (docs/design/manual.md says more).
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))     # the checkout's package, also when not installed
sys.path.insert(0, os.path.join(HERE, "_ext"))

project = "hcomm_cffi"
author = "hcomm_cffi contributors"
copyright = "the hcomm_cffi contributors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "cli_reference",          # _ext/cli_reference.py: the CLI reference from the argparse parsers
    "example_marks",          # _ext/example_marks.py: the reason under each block the test suite does not run
]
source_suffix = {".md": "markdown"}
root_doc = "index"
# _bench: the generated benchmark tables, included by guide/benchmarks.md (not pages of their own)
exclude_patterns = ["_build", "_bench/*", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
# the annotation aliases of the package, shown by name (their definitions are in the reference)
autodoc_type_aliases = {name: name for module, names in (
    ("hcomm_cffi.types", ("BufferLike", "ReduceOpLike", "StreamLike", "CData", "PathLike")),
    ("hcomm_cffi.algorithms", ("AlgorithmArg",)),
    ("hcomm_cffi.api.comm", ("TopologyArg",))) for name in names}
# torch_npu exists only on Ascend machines
autodoc_mock_imports = ["torch_npu"]
#: torch is not in the docs extra (it is gigabytes): without it the backend's reference page says so instead
HAVE_TORCH = importlib.util.find_spec("torch") is not None and os.environ.get("HCOMM_DOCS_WITHOUT_TORCH") != "1"

html_theme = "furo"
html_title = "hcomm_cffi"


# The package's docstrings are prose with ``literals`` (not reStructuredText markup): a ``*`` in
# ``(size, *x.shape)``, a ``|`` or a ``name_`` would otherwise be read as emphasis, a substitution or a link.
_LITERAL = re.compile(r"(``.+?``|`[^`]+`)")


def _prose(line: str) -> str:
    parts = _LITERAL.split(line)
    return "".join(p if i % 2 else re.sub(r"(?<!\\)([*|])", r"\\\1", re.sub(r"(?<=\w)_(?=[\s,.;:)]|$)", r"\\_", p))
                   if "**" not in p else p
                   for i, p in enumerate(parts))


def _docstring_as_prose(app, what, name, obj, options, lines):  # noqa: ANN001 (Sphinx's event signature)
    lines[:] = [_prose(line) for line in lines]


# Sphinx 9 prints an alias inside a Union (``Optional[BufferLike]``) as ``TypeAliasForwardRef('BufferLike')``:
# print its name, as Sphinx does for the alias alone
try:
    from sphinx.util.inspect import TypeAliasForwardRef as _AliasRef
    _AliasRef.__repr__ = lambda self: str(self.name)  # type: ignore[method-assign]
except ImportError:      # older Sphinx: no such class, nothing to fix
    pass


def _without_torch(app, docname, source):  # noqa: ANN001
    """The torch backend's reference needs torch to import; a build without it says so on that page."""
    if docname == "reference/api/torch" and not HAVE_TORCH:
        source[0] = re.sub(r"```\{eval-rst\}\n\.\. automodule:: hcomm_cffi\.torch\n.*?```",
                           "This build of the manual had no torch installed (the `[torch]` extra), so the reference "
                           "of `hcomm_cffi.torch` is not generated here; the guide's {doc}`../../guide/torch` "
                           "describes the backend.", source[0], flags=re.S)


def setup(app):  # noqa: ANN001
    app.connect("autodoc-process-docstring", _docstring_as_prose)
    app.connect("source-read", _without_torch)
