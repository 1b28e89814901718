import sys

from verify import entry_point
from verify.bench.cli import main

raise SystemExit(entry_point.run("verify bench", lambda: main(sys.argv[1:]),
                                 on_interrupt="no results written or left half-written"))
