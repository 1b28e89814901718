"""The unit tier's line coverage per package, as the Markdown table docs/testing.md carries (make coverage).

    coverage_table.py DATA_FILE
Measured in the pytest process only: code that tests run as a child process (`python -m verify`, the
builder's steps, the GPU workers) counts where an in-process test reaches it, not through the children.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import coverage

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: coverage_table.py DATA_FILE", file=sys.stderr)
        return 2
    data = coverage.Coverage(data_file=argv[0])
    data.load()
    per_package: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name in data.get_data().measured_files():
        path = Path(name)
        try:
            relative = path.resolve().relative_to(REPO)
        except ValueError:
            continue
        _, statements, _, missing, _ = data.analysis2(name)
        package = "/".join(relative.parts[:-1]) or relative.parts[0]
        per_package[package][0] += len(statements)
        per_package[package][1] += len(statements) - len(missing)
    total = [sum(v[0] for v in per_package.values()), sum(v[1] for v in per_package.values())]
    print("| package | statements | covered |\n|---|---|---|")
    for package, (count, covered) in sorted(per_package.items()):
        print(f"| `{package}/` | {count} | {100 * covered / max(count, 1):.0f}% |")
    print(f"| **all** | {total[0]} | {100 * total[1] / max(total[0], 1):.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
