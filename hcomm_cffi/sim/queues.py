"""The emulator's object model: task queues (a Thread's or a stream's), thread handles with their notifies, events.

The executor (sim/runtime.py) runs the tasks these hold; communicators (sim/comm.py) own the threads.  A
queue's and a thread's communicator is typed loosely here: sim/comm.py imports this module, and nothing here
points back up to it.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Optional, Tuple

if TYPE_CHECKING:  # pragma: no cover
    from .tasks import Task

__all__ = ["Queue", "SimThread", "SimEvent"]


class Queue:
    """An ordered task queue: the execution context of a Thread or a stream."""

    __slots__ = ("name", "python_tasks", "error", "blocked_since", "executed", "comm", "checked", "raced", "capture",
                 "stamps", "programs", "ring")

    def __init__(self, name: str) -> None:
        self.name = name
        self.checked = False   # a thread of a communicator with the race checker runs here
        self.raced: List["SimThread"] = []   # those threads (an event recorded or waited here carries their clocks)
        # the tasks behind the replay ring's, which the Python loop and the compiled programs run (``tasks`` moves
        # the ring's here first; the executor's ring path reads this one to know the ring is all there is)
        self.python_tasks: Deque[Task] = deque()
        self.error: Optional[Tuple[int, int, str]] = None  # (HcclResult, aclError, message)
        self.blocked_since = 0.0
        self.executed = 0
        self.comm: Any = None   # its SimComm (sim/comm.py); None: a stream of no communicator
        self.capture: Any = None   # an ACL graph capture records what is launched here instead (sim/acl_graphs.py)
        self.stamps: Deque[int] = deque()   # native chunks launched here, not yet checked (sim/native.py _Plan.stamp)
        # compiled forms of launched task lists: (the queue position of its first task, sim/compiled.py Program)
        self.programs: Deque[Tuple[int, Any]] = deque()
        # repeated calls' whole compiled lists, launched while no task above was pending: they run before any task
        # above and are moved there (``tasks``) when anything but the executor's ring path looks (sim/compiled.py Ring)
        self.ring: Any = None

    @property
    def tasks(self) -> Deque["Task"]:
        """The tasks not yet run, in order (the replay ring's first: it is emptied into them)."""
        ring = self.ring
        if ring is not None and len(ring):
            self._spill(ring)
        return self.python_tasks

    def _spill(self, ring: Any) -> None:
        """Move the replay ring's segments into the (empty) task deque, each still registered as compiled, and their
        unconsumed chunk stamps to the front of the FIFO: a call launched since (``stamps`` already extended) runs
        after them."""
        tasks = self.python_tasks
        ahead: List[int] = []
        for program, at, stamps in ring.take():
            self.programs.append((self.executed + len(tasks) - at, program))
            tasks.extend(program.tasks[at:])
            ahead.extend(stamps)
        self.stamps.extendleft(reversed(ahead))

    def head(self) -> Optional["Task"]:
        """The task that runs next (None: nothing is pending), without emptying the replay ring."""
        ring = self.ring
        if ring is not None and len(ring):
            return ring.head()
        tasks = self.python_tasks
        return tasks[0] if tasks else None

    def pending(self) -> int:
        """The tasks not yet run, without emptying the replay ring."""
        ring = self.ring
        return len(self.python_tasks) + (ring.left if ring is not None else 0)


class SimThread:
    """A Thread handle's state: its queue and its binary thread notifies."""

    __slots__ = ("handle", "comm", "engine", "notifies", "queue", "main", "label", "vc", "actor")

    def __init__(self, handle: int, comm: Any, engine: int, notify_num: int, queue: Queue,
                 main: bool) -> None:
        self.handle = handle
        self.comm = comm
        self.engine = engine
        self.notifies: List[int] = [0] * notify_num
        self.queue = queue
        self.main = main
        self.label = f"thread 0x{handle:x}{' (stream)' if main else ''}"
        self.vc: Any = None    # vector clock of the race checker (sim.races), made on its first checked task
        self.actor = 0
        if comm.race is not None:
            queue.checked = True
            queue.raced.append(self)


class SimEvent:
    """An ACL event: counts how many of its records have executed, and when the last one did (sim/acl.py)."""

    __slots__ = ("handle", "recorded", "completed", "error", "flag", "stamp", "reset_at", "clocks")

    def __init__(self, handle: int, flag: int = 0) -> None:
        self.handle = handle
        self.recorded = 0
        self.completed = 0
        self.error: Optional[Tuple[int, int, str]] = None  # set when its stream failed first
        self.flag = flag            # aclrtCreateEventWithFlag's flag (ACL_EVENT_SYNC: a wait may precede the record)
        self.stamp = 0              # the stream clock (perf_counter_ns) when its last record executed; 0: none yet
        self.reset_at = 0           # ``recorded`` when aclrtResetEvent was last issued
        self.clocks: Dict[Any, Any] = {}   # race checker: per communicator, the clock its last record carries
