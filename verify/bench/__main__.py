import sys

from verify import entry_point
from verify.bench.cli import main
from verify.cli import BENCH_ON_INTERRUPT

raise SystemExit(entry_point.run("verify bench", lambda: main(sys.argv[1:]), on_interrupt=BENCH_ON_INTERRUPT))
