"""Re-decide call 1's recorded intervals with the final tie bands (verify/timing/rules.py): evidence, not product.

    PYTHONPATH=. python reports/h200-2026-12-01-timing/redecide.py reports/h200-2026-12-01-timing/call1/verify-[1-5].json

The bootstrap intervals are stored in each report and are a deterministic function of the rounds, so only
the band changes; the per-figure winner rule is verify.timing.stats.winner.
"""

import json
import sys

from verify.timing import rules, stats

for path in sys.argv[1:]:
    report = json.load(open(path))
    cells = []
    for t in report["timings"]:
        now = [stats.winner(tuple(t[f]["interval"]), rules.TIE_BANDS[f]) for f in rules.FIGURES]
        then = [t["winner"][f] for f in rules.FIGURES]
        cells.append(f"{t['kernel']} {t['case'].split(',')[0]}: {'/'.join(now)} (recorded {'/'.join(then)})")
    print(f"{path.rsplit('/', 1)[-1]}: " + "; ".join(cells))
