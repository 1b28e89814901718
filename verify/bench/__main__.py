import sys

from verify.bench.cli import main

raise SystemExit(main(sys.argv[1:]))
