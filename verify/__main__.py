from verify.runtime import interrupts

interrupts.early()  # a signal from here on is held until verify's handlers take it (one line, exit 1)
from verify.cli import main  # noqa: E402

raise SystemExit(main())
