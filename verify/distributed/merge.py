"""Many ranks' views of one check -> the one check the report shows (pure, torch-free)."""

from __future__ import annotations

from verify.checks import Check, Status
from verify.distributed.cases import LAYER

# Which view speaks for the check: the worst one. INFO (a figure) outranks PASS so a bandwidth
# figure is not hidden behind a plain PASS; SKIP only when every rank skipped.
_SEVERITY = {Status.FAIL: 4, Status.WARN: 3, Status.INFO: 2, Status.PASS: 1, Status.SKIP: 0}


def merge(name: str, views: dict[int, Check], world_size: int) -> Check:
    """One check from every rank's view of it (views keyed by rank, all of them present)."""
    worst = max(views.values(), key=lambda c: _SEVERITY[c.status]).status
    ranks = sorted(views)
    odd = [r for r in ranks if views[r].status is worst]
    # the first rank to fail is usually the cause; the others failed waiting for it in a collective
    first = min(odd, key=lambda r: (views[r].duration_s, r)) if worst is Status.FAIL else odd[0]
    speaker = views[first]
    others = [r for r in odd if r != first]
    if len(odd) < len(ranks):
        summary = (
            f"rank{'s' if len(odd) > 1 else ''} {', '.join(map(str, odd))} {worst.value}: {speaker.summary}"
        )
    elif worst is Status.FAIL and others:
        summary = (
            f"{speaker.summary} (rank {first}, the first to fail; rank{'s' if len(others) > 1 else ''}"
            f" {', '.join(map(str, others))} FAILed too)"
        )
    else:
        summary = f"{speaker.summary} (all {world_size} ranks)"
    details = {
        "world_size": world_size,
        "ranks": [
            {
                "rank": r,
                "status": views[r].status.value,
                "summary": views[r].summary,
                "details": views[r].details,
                "duration_s": round(views[r].duration_s, 4),
            }
            for r in ranks
        ],
    }
    if "figures" in speaker.details:  # the same figure on every rank (the collective's slowest median)
        details["figures"] = speaker.details["figures"]
    return Check(LAYER, name, worst, summary, details, max(v.duration_s for v in views.values()))
