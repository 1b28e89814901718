"""Start one rank process per device, rendezvous on a free localhost port, collect every rank's results.

Each rank is `python -m verify.distributed.rank` in its own session (process group), started with
torch's env:// rendezvous (MASTER_ADDR 127.0.0.1, a free MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK)
and NVLink multicast off. No torchrun, no torch in this process. Timeouts, so that a hung collective
costs one FAIL and never the run:
  - setup: every rank must join the group within setup_timeout(check_timeout_s);
  - each check: every rank must report it within check_timeout_s + REPORT_GRACE_S (the ranks' own
    process group times a collective out at check_timeout_s; the grace lets such a rank say so);
  - a rank that dies: the others get REPORT_GRACE_S more to report, then the group is killed;
  - the whole layer: group_timeout_s across every launch.
A check that does not complete on every rank is one FAIL naming the ranks that hung or died; then
every rank's process group is killed (SIGKILL) and the checks after it run in a fresh group, at most
MAX_LAUNCHES groups in all. A rank whose check raised reports it and exits (the group is out of step),
which also ends that launch. Standard library only.
"""

from __future__ import annotations

import collections
import dataclasses
import queue
import socket
import sys
import time
from typing import Any

from verify.checks import Check, Status
from verify.distributed.cases import LAYER
from verify.distributed.merge import merge
from verify.distributed.plan import Topology
from verify.distributed.rank import MULTICAST_OFF
from verify.runtime.json_lines_child import JsonLinesChild, describe_exit, last_line, verify_env

MAX_LAUNCHES = 3  # the first group plus two fresh ones after a hang or a death
REPORT_GRACE_S = 5.0
# Joining is Python + torch import + CUDA context + NCCL communicator: seconds alone, tens of seconds
# with 8 ranks starting at once on a busy node; a short --check-timeout must not cut it.
SETUP_TIMEOUT_MIN_S = 60.0


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    topology: Topology
    checks: tuple[str, ...]
    seed: int
    check_timeout_s: float
    group_timeout_s: float


@dataclasses.dataclass
class LayerResult:
    checks: list[Check]
    launches: list[dict[str, object]]  # per group started: port, ranks (pid, device, exit), outcome
    ready: dict[int, dict[str, object]]  # each rank's ready event from the first group that got ready
    wall_s: float = 0.0


def setup_timeout(check_timeout_s: float) -> float:
    return max(check_timeout_s, SETUP_TIMEOUT_MIN_S)


def free_port() -> int:
    """A port nobody listens on now; rank 0's store binds it a moment later (a collision is retried once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rank_env(rank: int, world_size: int, port: int) -> dict[str, str]:
    env = verify_env()
    env.update(MULTICAST_OFF)
    env.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size),
        }
    )
    return env


class _Rank(JsonLinesChild):
    """One rank process; its protocol lines go to the shared queue as (rank, event), (rank, None) at the end."""

    def __init__(
        self,
        rank: int,
        plan: LaunchPlan,
        names: list[str],
        port: int,
        events: queue.Queue[tuple[int, dict[str, Any] | None]],
    ) -> None:
        self.rank = rank
        topo = plan.topology
        argv = [
            sys.executable,
            "-m",
            "verify.distributed.rank",
            "--checks",
            ",".join(names),
            "--seed",
            str(plan.seed),
            "--timeout",
            f"{plan.check_timeout_s:g}",
            "--backend",
            topo.backend,
            "--device",
            topo.device,
        ]
        super().__init__(
            argv, label=f"dist-rank{rank}", env=rank_env(rank, topo.world_size, port), events=events, tag=rank
        )


@dataclasses.dataclass
class _Outcome:
    checks: list[Check]
    finished: list[str]  # checks with a result (merged, or the FAIL that ended the launch)
    ready: dict[int, dict[str, object]]
    info: dict[str, object]
    setup_failure: str = ""  # why the group never got ready
    port_in_use: bool = False


class _Launch:
    def __init__(self, plan: LaunchPlan, names: list[str], deadline: float) -> None:
        self.plan, self.names, self.deadline = plan, names, deadline
        self.world = plan.topology.world_size
        self.events: queue.Queue[tuple[int, dict[str, Any] | None]] = queue.Queue()
        self.ready: dict[int, dict[str, object]] = {}
        self.ended: dict[int, float] = {}  # rank -> when its stream ended
        self.views: dict[str, dict[int, Check]] = collections.defaultdict(dict)
        self.broken: dict[int, str] = {}
        self.port = free_port()
        self.ranks: list[_Rank] = []
        self.hung: list[int] = []  # ranks still running when the launch was stopped

    def _pump_one(self, until: float) -> bool:
        """Take one event; False when `until` passed first."""
        remaining = until - time.monotonic()
        if remaining <= 0:
            return False
        try:
            rank, event = self.events.get(timeout=remaining)
        except queue.Empty:
            return False
        if event is None:
            self.ended[rank] = time.monotonic()
        elif event["event"] == "ready":
            self.ready[rank] = event
        elif event["event"] == "result":
            check = Check.from_json(event["check"])
            self.views[check.name][rank] = check
        elif event["event"] == "broken":
            self.broken[rank] = str(event.get("error", ""))
        return True

    def _wait(self, done, until: float) -> None:  # noqa: ANN001 - done: () -> bool
        """Pump events until done(), `until`, or every rank still owing an answer has ended (+ grace for the rest)."""
        while not done():
            owing = [r for r in range(self.world) if r not in self.ended]
            if not owing:
                return
            if self.ended:
                until = min(until, min(self.ended.values()) + REPORT_GRACE_S)
            if not self._pump_one(until):
                return

    def run(self) -> _Outcome:
        outcome = _Outcome([], [], self.ready, {"port": self.port, "checks": list(self.names)})
        try:
            for rank in range(self.world):  # inside: a rank that cannot start must not strand the others
                self.ranks.append(_Rank(rank, self.plan, self.names, self.port, self.events))
            self._wait(
                lambda: len(self.ready) == self.world,
                min(time.monotonic() + setup_timeout(self.plan.check_timeout_s), self.deadline),
            )
            if len(self.ready) < self.world:
                self._stop()
                outcome.setup_failure = self._setup_failure()
                outcome.port_in_use = any(
                    "address already in use" in r.stderr_tail.lower() for r in self.ranks
                )
                outcome.info["outcome"] = "setup failed"
                return outcome
            for name in self.names:
                started = time.monotonic()
                limit = min(started + self.plan.check_timeout_s + REPORT_GRACE_S, self.deadline)
                self._wait(lambda n=name: len(self.views[n]) == self.world, limit)
                outcome.finished.append(name)
                if len(self.views[name]) == self.world:
                    outcome.checks.append(merge(name, self.views[name], self.world))
                    if self.broken:
                        break
                    continue
                self._stop()
                outcome.checks.append(self._incomplete(name, time.monotonic() - started))
                break
            outcome.info["outcome"] = (
                "completed" if outcome.finished == self.names and not self.broken else "stopped"
            )
        except BaseException:
            self._stop()  # Ctrl-C or a bug here: never leave a rank behind
            raise
        finally:
            for child in self.ranks:
                child.finish(REPORT_GRACE_S)
            outcome.info["ranks"] = [self._rank_info(r) for r in self.ranks]
        return outcome

    def _stop(self) -> None:
        self.hung = [r.rank for r in self.ranks if r.running()]
        for rank in self.ranks:
            rank.kill()
        for rank in self.ranks:
            rank.finish(0)

    def _rank_info(self, rank: _Rank) -> dict[str, object]:
        ready = self.ready.get(rank.rank, {})
        return {
            "rank": rank.rank,
            "pid": rank.pid,
            "device": ready.get("device"),
            "exit": describe_exit(rank.returncode),
            "wall_s": round(time.monotonic() - rank.started, 3),
        }

    def _dead(self, rank: _Rank) -> str:
        line = last_line(rank.stderr_tail)
        return f"rank {rank.rank} died ({describe_exit(rank.returncode)})" + (f": {line}" if line else "")

    def _setup_failure(self) -> str:
        died = [
            r for r in self.ranks if r.rank not in self.hung
        ]  # a rank that joined and died stops the rest too
        if died:
            return "; ".join(self._dead(r) for r in died[:2])
        ranks = ", ".join(str(r.rank) for r in self.ranks if r.rank not in self.ready)
        limit = min(setup_timeout(self.plan.check_timeout_s), self.plan.group_timeout_s)
        return f"rank(s) {ranks} did not join the {self.plan.topology.backend} group within {limit:g} s"

    def _incomplete(self, name: str, spent_s: float) -> Check:
        views = self.views[name]
        missing = [r for r in self.ranks if r.rank not in views]
        hung = [r.rank for r in missing if r.rank in self.hung]
        parts = []
        if hung:
            who = f"rank{'s' if len(hung) > 1 else ''} {', '.join(map(str, hung))}"
            gone = [r for r in sorted(self.ended, key=lambda r: self.ended[r]) if r not in hung]
            if time.monotonic() >= self.deadline:
                parts.append(
                    f"{who} did not finish before the layer's time limit of {self.plan.group_timeout_s:g}"
                    " s ran out"
                )
            elif spent_s < self.plan.check_timeout_s and gone:
                parts.append(f"{who} still running {REPORT_GRACE_S:g} s after rank {gone[0]} had ended")
            else:
                parts.append(f"{who} did not finish within {self.plan.check_timeout_s:g} s")
        parts += [self._dead(r) for r in missing if r.rank not in self.hung][:2]
        failed = [(r, c) for r, c in sorted(views.items()) if c.status is Status.FAIL]
        if failed:
            parts.append(f"rank {failed[0][0]}: {failed[0][1].summary}")
        fix = (
            " (rerun with NCCL_DEBUG=INFO to see where it stopped)"
            if self.plan.topology.backend == "nccl"
            else ""
        )
        summary = (
            f"{name}: {'; '.join(parts)} — a hung or broken collective: all {self.world} rank processes"
            f" were killed{fix}"
        )
        details = {
            "world_size": self.world,
            "timeout_s": self.plan.check_timeout_s,
            "seed": self.plan.seed,
            "hung_ranks": hung,
            "died_ranks": [r.rank for r in missing if r.rank not in self.hung],
            "ranks": [
                {"rank": r, "status": c.status.value, "summary": c.summary, "details": c.details}
                for r, c in sorted(views.items())
            ],
            "stderr_tails": {str(r.rank): r.stderr_tail for r in missing},
        }
        return Check(LAYER, name, Status.FAIL, summary, details, spent_s)


def run(plan: LaunchPlan) -> LayerResult:
    """Run plan.checks across the ranks; never raises for a rank that hangs, dies or misbehaves."""
    t0 = time.monotonic()
    deadline = t0 + plan.group_timeout_s
    pending = list(plan.checks)
    result = LayerResult([], [], {})
    port_retried = False
    last_trouble = ""
    while pending and len(result.launches) < MAX_LAUNCHES and time.monotonic() < deadline:
        outcome = _Launch(plan, pending, deadline).run()
        result.launches.append(outcome.info)
        if not result.ready and len(outcome.ready) == plan.topology.world_size:
            result.ready = dict(outcome.ready)
        if outcome.setup_failure:
            if outcome.port_in_use and not port_retried:
                port_retried = True  # another program took the port between our probe and rank 0's bind
                continue
            result.checks.append(
                Check(
                    LAYER,
                    "setup",
                    Status.FAIL,
                    f"the {plan.topology.world_size}-rank {plan.topology.backend} group could not start: "
                    f"{outcome.setup_failure}; not run: {', '.join(pending)}",
                    {"not_run": list(pending), "launch": outcome.info, "seed": plan.seed},
                )
            )
            pending = []
            break
        result.checks.extend(outcome.checks)
        pending = [n for n in pending if n not in outcome.finished]
        last_trouble = next(
            (c.summary for c in reversed(outcome.checks) if c.status is Status.FAIL), last_trouble
        )
    if pending:
        why = (
            f"the layer's time limit of {plan.group_timeout_s:g} s ran out"
            if time.monotonic() >= deadline
            else f"{len(result.launches)} rank groups were started and stopped"
        )
        result.checks.append(
            Check(
                LAYER,
                "not_run",
                Status.FAIL,
                f"{len(pending)} distributed check(s) not run: {why} (last: {last_trouble or 'see details'})",
                {"not_run": list(pending), "seed": plan.seed},
            )
        )
    result.wall_s = round(time.monotonic() - t0, 3)
    return result
