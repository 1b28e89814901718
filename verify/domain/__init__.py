"""The project's domain vocabulary, each value with one parser and its renderings, shared by toolchain/spec
(the matrix), toolchain/builder (inside the image) and verify: `arch` (a GPU arch, an arch list), `commit`
(the short-sha rule), `apex_tree` (the Apex source-tree check), `extras` (the contrib extras), `paths` (a
path on a command line), `layout` (what a build leaves, and the image's /opt/apex), and `problem`
(ValueProblem: what a value that does not parse says).

Standard library only: the builder and verify import it inside images (Python 3.10).
"""
