"""Peak memory of a build's whole process tree, sampled from /proc (stdlib, Linux).

`resource.getrusage(RUSAGE_CHILDREN).ru_maxrss` only gives the largest single descendant; ninja
and setuptools run many compilers at once, so the number that decides whether a host runs out of
memory is the sum over the tree, sampled here every `interval` seconds.
"""

from __future__ import annotations

import os
import threading

from verify.runtime import input_files

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: str) -> tuple[int, int] | None:
    """(ppid, rss bytes) of a process, None if it vanished."""
    try:
        text = input_files.read_system_text(f"/proc/{pid}/stat")
    except input_files.InputFileError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # the command name may hold spaces and parens
    return int(fields[1]), int(fields[21]) * _PAGE


def tree_rss_bytes(root: int) -> int:
    """Summed resident memory of `root` and all its descendants right now."""
    parent, rss = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = _stat(entry)
            if info:
                parent[int(entry)], rss[int(entry)] = info
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


class PeakSampler:
    """Samples a process tree's summed RSS in a daemon thread; `peak_bytes` holds the maximum."""

    def __init__(self, root: int, interval: float = 0.5) -> None:
        self.root, self.interval, self.peak_bytes = root, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, tree_rss_bytes(self.root))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
