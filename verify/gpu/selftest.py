"""CPU-only, torch-free check groups (selftest, selftest_peer) that exercise the worker machinery.

They let tests show, on any machine and in well under a second per process, what happens when a
group crashes, hangs or raises (see VERIFY_FAULT_INJECT in verify.gpu.worker). Not run by verify.
"""

from __future__ import annotations

import os

from verify.checks import Check, Status
from verify.gpu.cases import Case, case_seed


def setup() -> str:
    return f"cpu (selftest, pid {os.getpid()})"


def run_case(case: Case, seed: int) -> tuple[Check, list[dict]]:
    # What is under test is the process boundary, not arithmetic: a PASS means this result crossed it.
    # The tests check `total` against their own computation of the same seeded sum and `pid` against theirs.
    values = [(case_seed(seed, case.name) >> shift) % 97 for shift in range(0, 48, 4)]
    total = sum(v * v for v in values)
    return Check(
        case.layer,
        case.name,
        Status.PASS,
        f"{case.name}: computed in pid {os.getpid()}",
        {"seed": seed, "pid": os.getpid(), "total": total},
    ), []
