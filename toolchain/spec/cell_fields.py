"""The cell fields, declared once.

Each field is a key of matrix.toml's [defaults] and [cells.NAME], a Cell attribute (tag: Cell.id), and an option of
build.py (`--apex-ref` for apex_ref); it has one shape (a string, or a list that also accepts one string:
"8.0;9.0") and, where its grammar is fixed whatever the facts say, one pattern with the message that
names the fix. Derived from FIELDS: the matrix's key and type checks (field_shapes.py), the grammar
checks (cell_values.py), build.py's cell options and its overrides (toolchain/commands/). What a value
means (a CUDA with wheels, a Python torch supports) is checked against the facts in stack_fields.py and
apex_fields.py.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from toolchain.spec.compat import Compat

# Docker's tag grammar: https://docs.docker.com/reference/cli/docker/image/tag/
TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
TAG_MAX = 128
# An image repository (what --registry names): [registry[:port]/]name, lower-case path components.
REPOSITORY = r"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._/]|__|-+)[a-z0-9]+)*"
REPOSITORY_RE = re.compile(f"^{REPOSITORY}$")


@dataclasses.dataclass(frozen=True)
class Grammar:
    """A field's fixed grammar: a value that does not match is `KEY VALUE <problem>`, fixed by `use EXAMPLE<note>`."""

    pattern: re.Pattern[str]
    problem: str
    example: Callable[[Compat], str]  # the value the fix suggests, from the facts where they name one
    note: str = ""


@dataclasses.dataclass(frozen=True)
class CellField:
    name: str  # the matrix key and the Cell attribute
    kind: type  # str, or list (which also accepts one string: "8.0;9.0", "xentropy,bnp")
    help: str  # build.py's --help line
    env: str | None = None  # build.py takes the option's default from this environment variable
    grammar: Grammar | None = None

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")


_IMAGE = Grammar(
    # [registry[:port]/]name[:tag][@sha256:<64 hex>] (lower-case name; the digest is a pin)
    re.compile(f"^{REPOSITORY}" r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"),
    "is not an image reference docker accepts",
    lambda facts: "nvidia/cuda:12.4.1-devel-ubuntu22.04",
    " or pin a digest: name@sha256:<64 hex digits>",
)

FIELDS: tuple[CellField, ...] = (
    CellField("cuda", str, "CUDA version, e.g. 12.4 (torch defaults to the newest that ships it)"),
    CellField("torch", str, "torch version, e.g. 2.6 or 2.6.0"),
    CellField("python", str, "Python version, e.g. 3.12"),
    CellField(
        "os",
        str,
        "base OS, e.g. ubuntu22.04",
        grammar=Grammar(
            re.compile(r"[A-Za-z0-9_.-]+"), "cannot be part of an image tag", lambda facts: "ubuntu22.04"
        ),
    ),
    CellField("gcc", str, "host GCC major version"),
    CellField("archs", list, "GPU archs, e.g. '8.0;9.0' or 9.0+PTX"),
    CellField(
        "apex_repo",
        str,
        "Apex git URL",
        grammar=Grammar(
            # a URL, scp-like user@host:path, or an absolute path; never a word that starts with '-' (git would
            # read it as an option, e.g. --upload-pack=CMD), no whitespace or quotes
            re.compile(
                r"^(?:(?:https?|ssh|git|file)://[^\s'\"\\]+"
                r"|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s'\"\\-][^\s'\"\\]*|/[^\s'\"\\]*)$"
            ),
            "is not a git URL or an absolute path",
            lambda facts: facts.apex_repo,
            " (https://, ssh://, git://, file://, user@host:path or /path)",
        ),
    ),
    CellField(
        "apex_ref",
        str,
        "Apex commit, tag or branch",
        grammar=Grammar(
            # what git accepts as a ref name, minus the corner cases nobody writes (see git-check-ref-format)
            re.compile(r"^(?!.*\.\.)(?!.*//)[A-Za-z0-9_][A-Za-z0-9_./+-]*(?<![./])$"),
            "is not a git commit, tag or branch name",
            lambda facts: facts.apex_default_ref[:12],
            " (a commit sha) or a tag like 24.04.01",
        ),
    ),
    CellField("apex_flags", list, "APEX_* flags instead of the core set, e.g. APEX_CPP_EXT"),
    CellField("extras", list, "contrib extensions, e.g. xentropy,fast_layer_norm"),
    CellField(
        "base_devel",
        str,
        "devel base image (e.g. a local mirror, a digest pin, or any Debian/Ubuntu image: "
        "CUDA then comes from the package index); default $BASE_DEVEL_IMAGE",
        env="BASE_DEVEL_IMAGE",
        grammar=_IMAGE,
    ),
    CellField(
        "base_runtime",
        str,
        "runtime base image; default $BASE_RUNTIME_IMAGE",
        env="BASE_RUNTIME_IMAGE",
        grammar=_IMAGE,
    ),
    CellField(
        "torch_index_url",
        str,
        "pip index for torch (default: the PyTorch index for the CUDA)",
        grammar=Grammar(
            re.compile(r"^(?:https?|file)://[^\s'\"\\]+$"),
            "is not an http(s):// or file:// URL",
            lambda facts: "https://download.pytorch.org/whl/cu124",
            " (a pip index)",
        ),
    ),
    CellField(
        "tag", str, "image tag instead of the cell id"
    ),  # checked in cell_naming.py: its messages say why
    CellField("platform", str, "docker platform: linux/amd64 (default) or linux/arm64 (GH200, GB200)"),
)
BY_NAME = {field.name: field for field in FIELDS}
CELL_KEYS: dict[str, type] = {field.name: field.kind for field in FIELDS}
