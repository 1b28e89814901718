"""build.py's commands: the parser (parser.py) and one module per kind of command; toolchain/cli.py runs them."""
