import sys

from verify.bench.cli import main
from verify.runtime import entry_point

raise SystemExit(
    entry_point.run("verify bench", lambda: main(sys.argv[1:]), on_interrupt=entry_point.BENCH_ON_INTERRUPT)
)
