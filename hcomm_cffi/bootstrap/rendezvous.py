"""Root-info exchange over a key-value store: every rank claims its slot, rank 0 publishes the blob, all wait.

Protocol (:func:`exchange_root_info`), under ``<namespace>/e<epoch>/``:

* every rank claims ``claim/<rank>`` atomically (:meth:`KeyValueStore.claim`) with its identity: host,
  pid, a random token and its process start time.  A slot already held by a live process means two jobs
  share this rendezvous (same job id, ranktable, job directory or master address): the loser writes
  ``clash/<rank>`` naming the holder's token (and ``alarm``, the one key everyone polls) and fails at
  once naming both; every member of the holder's
  cohort that sees it fails too, so two jobs never join each other's communicators.  A loser whose
  process started after the holder's cohort completed (``done``) is a later job, not a missing member:
  it moves to the next epoch and forms its own cohort.
* rank 0 publishes ``root_info`` (or ``error``), prefixed by its claim's token so nobody takes a dead
  job's blob; every rank waits until all ranks claimed and the blob is there; ranks > 0 then write
  ``left/<rank>``; rank 0 (which may host the store) returns once all have left.
* a claim whose process died (the file store can tell) fails the others at once naming it; a rank that
  never arrives is named after ``timeout`` seconds.

With ``settle`` (jobs with no ``HCOMM_JOB_SECRET`` to tell them apart) rank 0 keeps a complete cohort open
for the longest start-up time of its members (:func:`_settle`) before it writes ``done``, so a clash stops
both jobs before any data moves.  With ``watch`` > 0 claims are held for the life of the process (so a
late rank of another job finds them instead of forming a cohort with other late ranks) and a daemon
thread watches the cohort's clash keys for ``watch`` seconds: a member of another job that arrives later
still is then detected, and ``on_clash`` (default: print the reason and terminate) stops this process
before it mixes more data with the other job.
"""
from __future__ import annotations

import atexit
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

from ..enums import HCCL_ROOT_INFO_BYTES
from .agreement import SettingsDisagree, disagreement
from .errors import BootstrapError, JobClash, RendezvousTimeout, StoreUnavailable, format_ranks
from .kvstore import KeyValueStore

__all__ = ["exchange_root_info", "next_generation", "timeout_error", "process_start_time", "release_claims"]

_GENERATIONS: Dict[str, int] = {}
_GEN_LOCK = threading.Lock()
_TOKEN_CHARS = 32
START_SLACK_S = 0.05          # /proc start times are in clock ticks (10 ms)
_LIVENESS_EVERY_S = 0.25      # how often arrived claims are probed for a dead holder
SETTLE_MIN_S, SETTLE_MAX_S = 0.1, 5.0   # bounds of rank 0's wait for clashes once all ranks arrived (no job secret)
SPLIT_MIN_S = 1.0             # the least a cohort waits before blaming missing ranks' different job secret
STORE_GONE_S = 1.0            # a store that answered this rank and then refuses connections this long is gone
_IMPORTED = time.time()
TIMED_OUT = "timed out"


def next_generation(job_id: str) -> int:
    """0, 1, 2, ... per job id in this process: the n-th bootstrap of a job uses its own keys.

    Every rank must bootstrap the same number of times in the same order (as every collective call).
    """
    with _GEN_LOCK:
        gen = _GENERATIONS.get(job_id, 0)
        _GENERATIONS[job_id] = gen + 1
        return gen


def process_start_time() -> float:
    """Wall-clock time this process started (Linux ``/proc``; elsewhere when this module was imported)."""
    try:
        with open("/proc/self/stat") as fh:
            ticks = int(fh.read().rsplit(")", 1)[1].split()[19])   # field 22, starttime, in clock ticks
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED


def timeout_error(what: str, missing: Sequence[int], size: int, timeout: float, timeout_src: str,
                   extra: str = "") -> RendezvousTimeout:
    absent = set(missing)                                  # once: the message stays linear in the world size
    arrived = [r for r in range(size) if r not in absent]
    msg = (f"bootstrap rendezvous: rank(s) {format_ranks(missing)} of {size} did not arrive within "
           f"{timeout:g} s ({timeout_src}) at the {what}"
           f"{'; arrived: ' + format_ranks(arrived) if arrived else '; no rank arrived'}{extra}. "
           "Every rank must call hcomm.init() / bootstrap.discover() the same number of times; "
           "look for a rank that crashed, hangs before init, or took another code path "
           "(raise HCCL_CONNECT_TIMEOUT if it is only slow)")
    return RendezvousTimeout(msg, missing, arrived)


def _until(deadline: float, op: Callable[[], Any]) -> Any:
    """Run ``op`` until it stops raising StoreUnavailable or the deadline passes (then re-raise)."""
    delay = 0.01
    while True:
        try:
            return op()
        except StoreUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.25)


def _parse(raw: Optional[bytes]) -> Dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _who(ident: Dict[str, Any]) -> str:
    return f"pid {ident.get('pid', '?')} on {ident.get('host', '?')}"


class _Cohort:
    """One rank's view of the ranks it rendezvouses with: their claim identities, read once each."""

    def __init__(self, store: KeyValueStore, ens: str, rank: int, size: int, me: Dict[str, Any]) -> None:
        self.store, self.ens, self.rank, self.size = store, ens, rank, size
        self.idents: Dict[int, Dict[str, Any]] = {rank: me}
        self.seen_alive: Set[int] = set()
        self.reported = False      # this rank's failure is already in the store (rank 0's error key)

    def claim_key(self, r: int) -> str:
        return f"{self.ens}/claim/{r}"

    def ident(self, r: int) -> Dict[str, Any]:
        """The identity of the claim of rank ``r`` (read on first use; {} while it is not there)."""
        if r in self.idents:
            return self.idents[r]
        key = self.claim_key(r)
        got = _parse(self.store.get(key))
        if got:
            state = self.store.alive(key)
            if state is not False:      # a dead process's claim is not kept: the real rank may take it over
                self.idents[r] = got
                if state:
                    self.seen_alive.add(r)
        return got

    def token0(self) -> str:
        return str(self.ident(0).get("token", ""))

    def clash(self, failures: bool = False) -> Optional[str]:
        """The reason another job's rank lost a slot to a member of this cohort (or, with ``failures``, a
        member failed its rendezvous), or None."""
        if self.store.get(f"{self.ens}/alarm") is None:
            return None     # one key to poll: every clash or failure raises it first
        kinds = ("clash", "failed") if failures else ("clash",)
        keys = [f"{self.ens}/{kind}/{r}" for kind in kinds for r in range(self.size)]
        absent = set(self.store.missing(keys))
        for key in (k for k in keys if k not in absent):
            r = int(key.rsplit("/", 1)[1])
            found = _parse(self.store.get(key))
            if found and found.get("holder") == self.ident(r).get("token"):
                if found.get("timeout"):
                    return TIMED_OUT   # a member gave up at its deadline: this rank reports its own view
                return str(found.get("message", "another job claimed a slot of this rendezvous"))
        return None

    def fail(self, exc: BaseException) -> None:
        """Tell the others at once that this rank failed its rendezvous (it stays alive, so no lock says so)."""
        if isinstance(exc, (JobClash, SettingsDisagree)) or self.reported:
            return      # they see the same clash or difference, or rank 0's error, themselves
        text = (f"bootstrap rendezvous: rank {self.rank} ({_who(self.idents[self.rank])}) failed its rendezvous in the "
                f"{self.store.description}: {type(exc).__name__}: {exc}")
        try:
            self.store.set(f"{self.ens}/failed/{self.rank}",
                           json.dumps({"holder": self.idents[self.rank]["token"], "message": text,
                                       "timeout": isinstance(exc, RendezvousTimeout)}).encode())
            self.store.set(f"{self.ens}/alarm", b"1")
        except BootstrapError:
            pass

    def stale(self, present: Sequence[int]) -> List[int]:
        """Of the ranks whose claim is there, those whose process is dead (left by an earlier job).

        Raises BootstrapError naming a rank of this cohort that died (seen alive, or arrived after this process
        started): it will never finish.
        """
        found = []
        for r in present:
            if r == self.rank:
                continue
            state = self.store.alive(self.claim_key(r))
            if state:
                self.seen_alive.add(r)
            elif state is False and self.finished(r):
                self.seen_alive.add(r)      # finished (or failed, which clash() reports) and released its claim
            elif state is False:
                ident = _parse(self.store.get(self.claim_key(r)))
                # it arrived after this process started: a member of this cohort (an earlier job's rank arrived
                # before), so it died here rather than being left over
                if r in self.seen_alive or float(ident.get("arrived", 0)) >= float(self.idents[self.rank]["start"]):
                    raise BootstrapError(f"bootstrap rendezvous: rank {r} ({_who(ident)}) exited during "
                                         f"the rendezvous in the {self.store.description}; it will never finish it: "
                                         "look at its own output for why")
                found.append(r)
        return found

    def finished(self, r: int) -> bool:
        """Rank ``r`` is past its part of the exchange (left, rank 0's done or error, or failed)."""
        keys = [f"{self.ens}/left/{r}", f"{self.ens}/failed/{r}"] + (
            [f"{self.ens}/done", f"{self.ens}/error"] if r == 0 else [])
        return len(self.store.missing(keys)) < len(keys)



def _clash_text(store: KeyValueStore, rank: int, holder: Dict[str, Any], ns: str) -> str:
    return (f"bootstrap rendezvous: two jobs share the {store.description} (namespace {ns!r}): rank {rank} is "
            f"already claimed by {_who(holder)}, a live process of another job, so this process ({_who({'pid': os.getpid(), 'host': socket.gethostname()})}) "
            "and that job both stop rather than join each other's communicator. They share the job id (HCOMM_JOB_ID, "
            "or the ranktable's file name), HCOMM_RUN_JOB_DIR or the master address: give each job its own "
            "HCOMM_JOB_ID (and HCOMM_JOB_SECRET), or start each with hcomm run")


def _claim_slot(store: KeyValueStore, ns: str, rank: int, me: Dict[str, Any], deadline: float, timeout: float,
                timeout_src: str, size: int) -> str:
    """Claim ``rank``'s slot in the first epoch where it is free to this process; returns that epoch's namespace."""
    raw = json.dumps(me).encode()
    epoch = 0
    while True:
        ens = f"{ns}/e{epoch}"
        key = f"{ens}/claim/{rank}"
        try:
            held = _until(deadline, lambda: store.claim(key, raw))
        except StoreUnavailable:
            raise timeout_error(store.description, [0] if rank else [], size, timeout, timeout_src,
                                 extra=" (rank 0 never served the store)") from None
        done = _parse(store.get(f"{ens}/done"))
        owner0 = _parse(store.get(f"{ens}/claim/0"))
        completed = bool(done) and done.get("token") == owner0.get("token")
        if held is None:
            # a cohort that completed after this claim saw it (rank 0 names its members): this process is in it
            if not completed or me["token"] in done.get("members", ()):
                return ens
            # the slot was an exited rank's of a cohort that completed (its rank 0 lingers): joining it would
            # take that job's root info; this process belongs to a later job, in a later epoch
            store.release(key)
            epoch += 1
            continue
        holder = _parse(held)
        if completed and float(me["start"]) > float(done.get("time", 0)) + START_SLACK_S:
            epoch += 1      # that cohort completed before this process started: a later job, its own epoch
            continue
        message = _clash_text(store, rank, holder, ns)
        store.set(f"{ens}/clash/{rank}", json.dumps({"holder": holder.get("token"), "message": message}).encode())
        store.set(f"{ens}/alarm", b"1")
        raise JobClash(message)


def exchange_root_info(store: KeyValueStore, rank: int, size: int, make_root_info: Callable[[], bytes],
                       timeout: float, namespace: str, timeout_src: str = "HCCL_CONNECT_TIMEOUT", *,
                       watch: float = 0.0, settle: bool = False, started: Optional[float] = None,
                       on_clash: Optional[Callable[[str], None]] = None,
                       agree: Optional[Dict[str, str]] = None) -> bytes:
    """Claim this rank's slot, publish (rank 0) or fetch the root info, and wait for every rank.

    Returns the root info once all ``size`` ranks have arrived.  Raises JobClash when another job holds
    a slot of this rendezvous (on every rank of both jobs), RendezvousTimeout naming the missing ranks
    after ``timeout`` seconds, BootstrapError if rank 0 failed to make the root info or a rank died.
    ``agree``: this rank's settings that must be equal on every rank (``agreement.local_settings``);
    a difference raises SettingsDisagree on every rank, naming the variable, the ranks and the values.
    ``watch``, ``settle``, ``started`` and ``on_clash``: see the module doc (``started`` defaults to this process's
    start time).  With ``watch`` the store must stay usable after the call (the caller must not close it).
    """
    deadline = time.monotonic() + timeout
    ns = namespace.strip("/")
    me = {"host": socket.gethostname(), "pid": os.getpid(), "token": secrets.token_hex(_TOKEN_CHARS // 2),
          "start": process_start_time() if started is None else started, "arrived": time.time()}
    if agree is not None:
        me["settings"] = dict(agree)
    ens = _claim_slot(store, ns, rank, me, deadline, timeout, timeout_src, size)
    cohort = _Cohort(store, ens, rank, size, me)
    try:
        blob = _wait_for_all(cohort, make_root_info, deadline, timeout, timeout_src, settle=settle)
        _leave(cohort, deadline, release=not watch)
    except BaseException as exc:
        cohort.fail(exc)
        raise
    if watch:
        _watch(cohort, watch, on_clash or _stop_process)
    return blob


def _settle(cohort: _Cohort) -> float:
    """How long rank 0 keeps a complete cohort open for a clash to show: the longest start-up of a member.

    A rank of another job that took a slot here has siblings started with it; they arrive within about
    one start-up time of it, and their failed claims then stop this cohort before any data moves.
    """
    startups = [float(i.get("arrived", 0)) - float(i.get("start", 0)) for i in cohort.idents.values()]
    return min(SETTLE_MAX_S, max([SETTLE_MIN_S] + [t for t in startups if t > 0]))


def _wait_for_all(cohort: _Cohort, make_root_info: Callable[[], bytes], deadline: float, timeout: float,
                  timeout_src: str, settle: bool) -> bytes:
    store, ens, rank, size = cohort.store, cohort.ens, cohort.rank, cohort.size
    blob: Optional[bytes] = None
    token = str(cohort.idents[rank]["token"])
    if rank == 0:
        try:
            blob = bytes(make_root_info())
            if len(blob) != HCCL_ROOT_INFO_BYTES:
                raise BootstrapError(f"the root info is {len(blob)} bytes; expected {HCCL_ROOT_INFO_BYTES}")
        except Exception as exc:
            store.set(f"{ens}/error", token.encode() + f"{type(exc).__name__}: {exc}".encode())  # the others fail fast
            cohort.reported = True
            raise
        store.set(f"{ens}/root_info", token.encode() + blob)
    keys = [cohort.claim_key(r) for r in range(size)]
    waiting: List[int] = list(range(size))
    stale: List[int] = []
    delay, probed = 0.002, 0.0
    refused_since: Optional[float] = None      # when the store, which answered this rank's claim, began refusing
    settle_until: Optional[float] = None
    # a sibling job's ranks arrive within about one start-up time of each other: only a split that lasts longer
    # than that is one job whose ranks were given different secrets (never two jobs that just started)
    me = cohort.idents[rank]
    split_after = time.monotonic() + min(SETTLE_MAX_S, max(SPLIT_MIN_S, 2 * (float(me["arrived"]) - float(me["start"]))))
    while True:
        try:
            absent = {int(k.rsplit("/", 1)[1]) for k in store.missing(keys)}
            reason = cohort.clash(failures=True)
            if reason == TIMED_OUT:
                raise timeout_error(store.description, waiting or [0], size, timeout, timeout_src,
                                     extra=" (another rank reached the deadline first)")
            if reason is not None:
                raise (BootstrapError if "failed its rendezvous" in reason else JobClash)(reason)
            if blob is None:
                blob = _published(cohort)
            if not absent:      # everyone is here: the same verdict on every rank, before anyone may leave
                reason = disagreement({r: cohort.ident(r).get("settings", {}) for r in range(size)})
                if reason is not None:
                    raise SettingsDisagree(reason)
            now = time.monotonic()
            if now - probed >= _LIVENESS_EVERY_S or not absent:
                probed = now
                for r in range(size):       # remember who was seen alive, so a death is noticed at once
                    if r not in absent:
                        cohort.ident(r)
                stale = cohort.stale([r for r in range(size) if r not in absent])
                if absent and now >= split_after:
                    split = _split_by_secret(cohort, absent)
                    if split is not None:
                        raise BootstrapError(split)
            waiting = sorted(absent | set(stale))
        except StoreUnavailable as exc:
            now = time.monotonic()
            refused_since = (refused_since or now) if exc.refused else None
            if refused_since is not None and now - refused_since >= STORE_GONE_S:
                # it answered this rank's claim: the process serving it exited, and its keys went with it
                others = format_ranks([r for r in waiting if r != rank] or [0])
                raise BootstrapError(
                    f"bootstrap rendezvous: the {store.description} went away while rank {rank} waited for "
                    f"rank(s) {others} of {size}: it answered this rank's claim and has "
                    f"refused connections for {now - refused_since:.1f} s since, so the rendezvous cannot complete "
                    "(the process serving it exited: rank 0 failed or stopped -- read its error -- or the store was "
                    "another job's on the same address)") from None
            if now >= deadline:
                raise timeout_error(store.description, [0], size, timeout, timeout_src,
                                     extra=" (the store went away)") from None
        else:
            refused_since = None
            if not waiting and blob is not None:
                if rank == 0:
                    if settle_until is None:
                        settle_until = time.monotonic() + (_settle(cohort) if settle else 0.0)
                    if time.monotonic() < settle_until:
                        time.sleep(0.01)
                        continue
                    members = [cohort.ident(r).get("token") for r in range(size)]   # who completed it
                    store.set(f"{ens}/done", json.dumps({"token": token, "time": time.time(),
                                                         "members": members}).encode())
                    break
                if _parse(store.get(f"{ens}/done")).get("token") == cohort.token0():
                    break       # rank 0 saw everyone too: claims may now be released
        if time.monotonic() >= deadline:
            missing = waiting
            extra = "" if missing or blob is not None else " (rank 0 arrived but never published the root info)"
            raise timeout_error(store.description, missing or [0], size, timeout, timeout_src, extra)
        time.sleep(delay)
        delay = min(delay * 1.5, 0.05)
    return blob


def _split_by_secret(cohort: _Cohort, absent: Set[int]) -> Optional[str]:
    """Why the ``absent`` ranks never come: they claimed their slots in this store under another job secret.

    The secret keys the namespace (``<hash of the secret>-<generation>``), so ranks of one job given
    different secrets wait for each other in two namespaces until the timeout.  When the store can list
    its namespaces and a sibling of the same generation holds live claims of exactly the ranks missing
    here (and none of the ranks present), the job was split by its secrets: say so at once.
    """
    store = cohort.store
    names = store.namespaces()
    ns, _, epoch = cohort.ens.rpartition("/")
    if not names or not ns:
        return None
    generation = ns.rsplit("-", 1)[-1]
    present = set(range(cohort.size)) - absent
    for other in names:
        if other == ns or not (other == generation or other.endswith("-" + generation)):
            continue
        keys = [f"{other}/{epoch}/claim/{r}" for r in range(cohort.size)]
        gone = store.missing(keys)
        theirs = {r for r, k in enumerate(keys) if k not in gone and store.alive(k) is not False}
        if theirs and absent <= theirs and not theirs & present:
            return (f"bootstrap rendezvous: rank(s) {format_ranks(sorted(theirs))} arrived in the {store.description} "
                    f"with a different job secret (HCOMM_JOB_SECRET) than rank(s) {format_ranks(sorted(present))}; "
                    "ranks with different secrets never meet, so each side would wait for the other until the "
                    "timeout. Give every rank of the job the same HCOMM_JOB_SECRET (hcomm run exports one per "
                    "launch: do not set it per rank)")
    return None


def _published(cohort: _Cohort) -> Optional[bytes]:
    """Rank 0's blob when its claim is there and the blob carries that claim's token (never a dead job's)."""
    token0 = cohort.token0()
    if not token0:
        return None
    raw = cohort.store.get(f"{cohort.ens}/root_info") if 0 in cohort.idents else None   # never a dead job's blob
    if raw is not None and raw[:_TOKEN_CHARS].decode(errors="replace") == token0:
        blob = raw[_TOKEN_CHARS:]
        if len(blob) != HCCL_ROOT_INFO_BYTES:
            raise BootstrapError(f"the root info in the {cohort.store.description} is {len(blob)} bytes; "
                                 f"expected {HCCL_ROOT_INFO_BYTES}")
        return blob
    err = cohort.store.get(f"{cohort.ens}/error")
    if err is not None and err[:_TOKEN_CHARS].decode(errors="replace") == token0:
        raise BootstrapError(f"rank 0 could not create the root info: "
                             f"{err[_TOKEN_CHARS:].decode(errors='replace')}")
    return None


def _leave(cohort: _Cohort, deadline: float, release: bool) -> None:
    """Ranks > 0 mark themselves done; rank 0 waits for them, then (``release``) deletes the epoch's keys.

    Rank 0 may host the store (TCP server, torch's store), so it must not go away before every rank
    has read the root info.  A rank that never leaves only costs rank 0 the rest of the deadline.
    """
    store, ens, rank, size = cohort.store, cohort.ens, cohort.rank, cohort.size
    try:
        if rank:
            store.set(f"{ens}/left/{rank}", b"")   # its claim stays until rank 0 deletes the epoch
            return
        waiting = [f"{ens}/left/{r}" for r in range(1, size)]
        delay = 0.002
        while waiting and time.monotonic() < deadline:
            waiting = store.missing(waiting)
            if waiting:
                time.sleep(delay)
                delay = min(delay * 1.5, 0.05)
        if release:
            store.release(cohort.claim_key(rank))
            if not waiting:
                store.delete_prefix(ens)
    except BootstrapError:
        pass


_WATCHED: List[_Cohort] = []     # cohorts whose claims this process holds until it exits


def _watch(cohort: _Cohort, seconds: float, on_clash: Callable[[str], None]) -> None:
    """Hold this rank's claim until exit and watch the cohort's clash keys for ``seconds`` in a daemon thread."""
    if not _WATCHED:
        atexit.register(_release_all)
    _WATCHED.append(cohort)

    interval = min(5.0, 0.1 * max(1.0, cohort.size / 16))   # about ten looks a second at the store, job-wide

    def run() -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                reason = cohort.clash()
            except BootstrapError:
                reason = None          # the store went away (rank 0 exited): nothing more to learn
                break
            if reason is not None:
                on_clash(reason)
                return
            time.sleep(interval)

    threading.Thread(target=run, name="hcomm-rendezvous-watch", daemon=True).start()


def _after_fork_in_child() -> None:
    """A forked child holds none of its parent's claims: its exit must not give them up."""
    _WATCHED.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def release_claims() -> None:
    """Give up this process's held claims (at exit, or once it is done communicating: ``hcomm.finalize``)."""
    _release_all()


def _release_all() -> None:
    """At exit: give up this process's claims; the last member out removes a persistent store's keys."""
    for cohort in _WATCHED:
        store = cohort.store
        try:
            store.release(cohort.claim_key(cohort.rank))
            if store.persistent and not any(store.alive(cohort.claim_key(r)) for r in range(cohort.size)):
                store.delete_prefix(cohort.ens)       # the last member out
            store.close()
        except Exception:
            pass
    _WATCHED.clear()


def _stop_process(reason: str) -> None:
    """A member of another job reached this process's cohort: stop before any data is mixed."""
    sys.stderr.write(f"hcomm: fatal: {reason}\n")
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5.0)
    os._exit(70)
