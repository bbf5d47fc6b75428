"""A progress bar on stderr while ``hcomm bench`` runs, only when stderr is a terminal.

Two cases:

* the rank that reports (rank 0) owns a terminal: :class:`Bar` draws on it directly;
* ``hcomm bench`` launched the ranks itself: their output goes through the launcher's pipes, so rank 0
  writes one marker line per update (:func:`marker_line`), and the launching process hands the
  launcher a :class:`Relay` for stderr (draws the bar from marker lines, passes other lines through)
  and a :class:`Relay` view for stdout (clears the bar before each table line).

Updates are throttled to 10 per second; the bar is erased before any other output line.
"""
from __future__ import annotations

import threading
import time
from typing import IO, List, Optional

__all__ = ["Bar", "Relay", "marker_line", "ENV_PROGRESS", "MARKER"]

ENV_PROGRESS = "HCOMM_BENCH_PROGRESS"    # "relay": rank 0 writes marker lines to stderr
MARKER = "@@hcomm-bench-progress@@ "
_WIDTH = 30


def _lines(text: str) -> List[str]:
    """``text`` cut after each newline only (str.splitlines would also cut at \\r, \\x1e, ...)."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


def marker_line(index: int, total: int, done: int, iters: int) -> str:
    """The line rank 0 writes for one update when relaying."""
    return f"{MARKER}{index} {total} {done} {iters}\n"


def _render(index: int, total: int, done: int, iters: int) -> str:
    frac = (index + (done / iters if iters else 1.0)) / total if total else 1.0
    frac = min(1.0, max(0.0, frac))
    filled = int(frac * _WIDTH)
    return f"\r[{'#' * filled}{'.' * (_WIDTH - filled)}] size {min(index + 1, total)}/{total} " \
           f"iter {done}/{iters} {frac * 100:5.1f}%\x1b[K"


class Bar:
    """Draws the bar on ``stream`` (a terminal); :meth:`clear` erases it."""

    def __init__(self, stream: IO[str], interval: float = 0.1) -> None:
        self.stream = stream
        self.interval = interval
        self.last = 0.0
        self.shown = False

    def update(self, index: int, total: int, done: int, iters: int) -> None:
        """Redraw unless the previous redraw was less than ``interval`` ago (the last step always draws)."""
        now = time.monotonic()
        final = index + 1 >= total and done >= iters
        if not final and now - self.last < self.interval:
            return
        self.last = now
        self.stream.write(_render(index, total, done, iters))
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        """Erase the bar (before other output, and at the end)."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


class Relay:
    """A text stream for the launcher: marker lines drive ``bar``, other lines go to ``target``.

    Use one Relay per launcher stream (stdout, stderr) sharing one :class:`Bar` and one lock: each passed
    line erases the bar first and redraws it after.  It has no ``buffer`` attribute on purpose, so the
    launcher writes text through :meth:`write`.
    """

    def __init__(self, target: IO[str], bar: Bar, lock: Optional[threading.Lock] = None) -> None:
        self.target = target
        self.bar = bar
        self.lock = lock or threading.Lock()
        self._last: Optional[tuple] = None

    def write(self, text: str) -> int:
        with self.lock:
            for line in _lines(text):
                if line.startswith(MARKER):
                    try:
                        index, total, done, iters = (int(v) for v in line[len(MARKER):].split())
                    except ValueError:
                        continue
                    self._last = (index, total, done, iters)
                    self.bar.update(index, total, done, iters)
                    continue
                self.bar.clear()
                self.target.write(line)
                self.target.flush()
                if self._last is not None and not (self._last[0] + 1 >= self._last[1]
                                                   and self._last[2] >= self._last[3]):
                    self.bar.last = 0.0
                    self.bar.update(*self._last)
        return len(text)

    def flush(self) -> None:
        with self.lock:
            self.target.flush()

    def close(self) -> None:
        """Erase the bar for good."""
        with self.lock:
            self.bar.clear()

    def isatty(self) -> bool:
        return bool(self.target.isatty())
