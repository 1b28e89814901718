"""What every command line of the project does around its main (verify, verify bench, build.py).

- stdout/stderr never raise (verify.runtime.console_streams: closed pipe, closed descriptor, full disk, ASCII locale);
- SIGINT, SIGTERM and SIGHUP raise verify.runtime.interrupts.Interrupted in the main thread and kill every child
  process at once (verify.runtime.child_processes), from the CLI's first statement (interrupts.early()) to its
  last (a later signal changes nothing); the run then ends with one line on stderr and exit 1
  (exit_codes.FAILED: a run that was stopped did not verify or build anything), never a traceback and
  never 124-127 or 128+N;
- when the run ends, however it ends, no child process it started is left running; between a signal
  and the end of the run no new child is started.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from verify.runtime import child_processes, console_streams, exit_codes, interrupts

# what an interrupted `verify bench` left: said here because `python -m verify bench` and
# `python -m verify.bench` both start it, and verify/cli.py must not import the optional bench part
BENCH_ON_INTERRUPT = "no results written or left half-written"


def run(prog: str, body: Callable[[], int], *, on_interrupt: str = "") -> int:
    """Call `body` under these rules and return its exit code. `on_interrupt` completes the line printed
    after a signal (what was kept, what was not)."""
    with console_streams.tolerant(prog):
        child_processes.allow()
        try:
            with interrupts.raising():
                try:
                    interrupts.raise_if_received()  # held by interrupts.early() while Python started
                    code = body()
                except KeyboardInterrupt as exc:  # Interrupted, or a KeyboardInterrupt raised by hand
                    child_processes.stop_all()
                    name = exc.signal_name if isinstance(exc, interrupts.Interrupted) else "SIGINT"
                    sys.stderr.write(
                        f"{prog}: interrupted by {name}{'; ' + on_interrupt if on_interrupt else ''}"
                        f" (exit {exit_codes.FAILED})\n"
                    )
                    code = exit_codes.FAILED
                finally:
                    interrupts.stop_raising()  # a signal from here on only kills children
                    if interrupts.received() is not None:
                        interrupts.hold_until_exit()  # a second Ctrl-C cannot turn the exit 1 into 130
                    child_processes.kill_all()
        except KeyboardInterrupt:  # a signal in the few statements before stop_raising(): the run is over
            child_processes.kill_all()
            code = exit_codes.FAILED
        finally:
            child_processes.allow()  # the run is over: a later run (or a library caller) may start children
    return code
