"""``import hcomm``: the name the seed's programs use for this package.

``hcomm`` is not a second copy of the API: importing it puts the module object ``hcomm_cffi`` under
the name ``hcomm`` (``hcomm is hcomm_cffi``), so ``hcomm.init``, ``hcomm.Comm``, ``hcomm.set_device``
... are the package's own objects.  ``import hcomm.api`` (any ``hcomm.<sub>``) likewise gives the
module ``hcomm_cffi.<sub>`` itself, never a fresh import of the same file under a second name (which
would make a second ``Comm`` class that ``isinstance`` checks would not recognise).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Optional, Sequence

import hcomm_cffi

if TYPE_CHECKING:  # pragma: no cover  (type checkers see the package's names under this one)
    from hcomm_cffi import *  # noqa: F401,F403

_ALIAS, _TARGET = __name__, "hcomm_cffi"


class _SubmoduleAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``hcomm.<sub>`` to the already-imported (or now imported) module ``hcomm_cffi.<sub>``."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
        if not fullname.startswith(_ALIAS + "."):
            return None
        real = _TARGET + fullname[len(_ALIAS):]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(_TARGET + spec.name[len(_ALIAS):])

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when ``hcomm_cffi.<sub>`` was imported: nothing more to do."""


if not any(isinstance(f, _SubmoduleAlias) for f in sys.meta_path):
    sys.meta_path.insert(0, _SubmoduleAlias())
sys.modules[_ALIAS] = hcomm_cffi
