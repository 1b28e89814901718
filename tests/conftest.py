"""What every tier shares: the processes the suite starts see signals as a terminal's foreground job does.

A suite started in the background by a script (`cmd &` with no job control, `nohup`) inherits SIGINT and
SIGQUIT (and, under nohup, SIGHUP) ignored, and every process it starts would inherit that: the faults
tier's Ctrl-C and hang-up would reach programs that never see them (a build that runs on, a verify that
outlives its bound, a signal sweep whose SIGHUP moments all "finish first"). The suite itself keeps what
its launcher chose, a handler that does nothing standing in for the ignore, and since exec resets a
handler to the default, each child starts as it would from a terminal.

SIGTERM (a CI timeout, `kill`) ends the suite as Ctrl-C does, so fixtures are torn down: the registry,
servers and folders they started would otherwise outlive it. A second SIGTERM ends it at once."""

from __future__ import annotations

import os
import signal


def _ignored_by_the_launcher(signum, frame) -> None:
    """The suite goes on, as its launcher asked; a child it starts gets SIG_DFL."""


for _signal in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
    if signal.getsignal(_signal) is signal.SIG_IGN:
        signal.signal(_signal, _ignored_by_the_launcher)


_SUITE_PID = os.getpid()


def _terminated(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the next one is not caught
    if os.getpid() != _SUITE_PID:  # a fork of the suite that has not exec'd: die as SIGTERM's default does
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise KeyboardInterrupt("SIGTERM")


if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _terminated)
