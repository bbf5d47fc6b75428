"""What a backend offers beyond its C functions: :class:`Capabilities`, and :class:`Backend`, the methods for them.

Every lib object :func:`hcomm_cffi.lib.load` returns (``CannLibrary``, the emulator's ``SimLibrary``
and its ABI-checking wrapper) derives from :class:`Backend`, so the layers above ask *what* it can
do (``lib.capabilities``) and call the same methods on either, instead of testing its name or
reaching into an emulator-only helper.  Imports nothing from the package.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, Tuple

__all__ = ["Capabilities", "Backend", "CANN", "DataPlaneCall", "WAIT_NONE", "WAIT_COLLECTIVE", "WAIT_P2P"]

#: what a host waits in (:meth:`Backend.announce_wait`): nothing any more, a collective, a point-to-point operation
WAIT_NONE, WAIT_COLLECTIVE, WAIT_P2P = 0, 1, 2

#: one data-plane call as the layers above record it: a callable (their binding's method) and its arguments;
#: the backend calls it, it never needs the object it belongs to
DataPlaneCall = Tuple[Callable[..., None], Tuple[Any, ...]]


@dataclass(frozen=True)
class Capabilities:
    """What one backend is and does (read once per communicator; never a backend's name)."""

    #: the C functions are the emulator (host processes over /dev/shm): no device, no NPU binding
    emulator: bool
    #: host arrays can be handed to the data plane once declared device memory (:meth:`Backend.declare_device_memory`);
    #: False: the Comm API stages them into aclrtMalloc memory (CANN)
    host_memory_as_device: bool
    #: bytes the package's algorithms should move per step and peer (None: as many as the buffer allows)
    step_bytes: Optional[int]
    #: the library collectives (HcclAllReduce, ...) compare every rank's call in their first handshake
    #: and fail all ranks of a mismatch themselves
    checks_signatures_in_band: bool
    #: a host function can run in stream order between data-plane tasks (:meth:`Backend.host_task`)
    host_tasks: bool
    #: a replayed batch can be prepared once and launched cheaply (:meth:`Backend.prepare_batch`)
    prepares_batches: bool
    #: the host cores the ranks' schedules run on (the emulator: this host's); None: a device runs them
    host_cores: Optional[int] = None


#: a real CANN installation: nothing beyond its C functions
CANN = Capabilities(emulator=False, host_memory_as_device=False, step_bytes=None,
                    checks_signatures_in_band=False, host_tasks=False, prepares_batches=False)


class Backend:
    """The contract every lib object implements next to its C functions (defaults: CANN's answers)."""

    capabilities: Capabilities = CANN

    def declare_device_memory(self, addr: int, size: int) -> None:
        """Say that host range [addr, addr+size) stands for device memory (only with ``host_memory_as_device``)."""
        raise NotImplementedError(f"{type(self).__name__} has no host memory usable as device memory")

    def withdraw_device_memory(self, addr: int) -> bool:
        """Undo :meth:`declare_device_memory` of the range at ``addr``; False when there was none."""
        return False

    def prepare_batch(self, calls: Sequence[DataPlaneCall]) -> Any:
        """``calls`` (data-plane calls and arguments) validated once into tasks kept for :meth:`issue_prepared`.

        Only with ``prepares_batches``.
        """
        raise NotImplementedError(f"{type(self).__name__} does not prepare batches")

    def issue_prepared(self, prepared: Any) -> None:
        """Add what :meth:`prepare_batch` returned to the open batch (between HcommBatchModeStart and End)."""
        raise NotImplementedError(f"{type(self).__name__} does not prepare batches")

    def host_task(self, thread: int, fn: Callable[[], None]) -> DataPlaneCall:
        """A data-plane call (Binding method, arguments) that runs ``fn`` on ``thread`` in stream order.

        Only with ``host_tasks``; ``fn`` raising fails the stream, with its message, like a failed task.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot run host functions in stream order")

    def abandon_communicator(self, comm: Any, why: str, interrupted: bool = False) -> bool:
        """Discard the work still queued for communicator ``comm`` and tell its peers it failed (``why``).

        The Comm API calls it when a communicator breaks with work queued (an exception left a blocking
        wait -- ``interrupted``: peers need not wait for a more precise error --, a library failure, a
        mismatch): queued tasks must never run later against memory the caller has reused.  False: the
        backend cannot (CANN: the device runs what was queued; the Comm API's
        host buffers are staging copies, copied back only after a completed wait).
        """
        return False

    def announce_wait(self, comm: Any, kind: int, number: int, peer: int, text: str) -> None:
        """This rank's host now waits in ``text`` on communicator ``comm`` until it ends (``WAIT_NONE``: no longer).

        ``WAIT_COLLECTIVE``: collective ``number`` of the Comm API's count, with no point-to-point operation
        outstanding; ``WAIT_P2P``: a point-to-point operation with rank ``peer`` after ``number`` collectives.
        The emulator keeps it where a peer's blocked wait finds two ranks that wait for each other in calls
        that never meet, and fails naming both (sim/announce.py); CANN: nothing.
        """

    def collective_announcer(self, comm: Any) -> Optional[Callable[[int, int, str], None]]:
        """The function that says collective number ``seq`` of communicator ``comm`` (the Comm API's count) has
        signature ``value``, described by ``text`` ("" once ``value`` was described): ``announce(seq, value, text)``.

        The emulator keeps it where a peer whose wait never meets this call finds it, and fails with both calls
        named (sim/announce.py); None: nothing to tell (CANN).  Taken once per communicator: every collective
        calls it.
        """
        return None
