"""How every user error shows a value and suggests a fix: one truncation rule, one "did you mean" wording,
one escaping rule for text that came from outside (`printable`).

Used by verify and by the toolchain (which may import verify, never the reverse), so that a 50 MB
value is never echoed whole and a typo gets the same kind of hint everywhere.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

# A value longer than this is shown as its first SHOWN_HEAD characters, "…" and its length.
SHOWN_MAX = 120
SHOWN_HEAD = 60
# A line of a message longer than this is cut (the last resort for text we did not format, e.g. argparse's).
LINE_MAX = 1000
# Suggestions compare short words: a longer input gets none (difflib is quadratic in the length).
_SUGGEST_MAX = 200
_DOTTED = re.compile(r"[0-9]+(?:\.[0-9]+)*", re.ASCII)


def shown(value: object, *, quote: bool = True) -> str:
    """`repr(value)` for a message, at most about SHOWN_MAX characters: `'aaaa…' (52428800 characters)`.

    quote=False leaves a short printable string as it is (`unknown flag APEX_X`).
    """
    if isinstance(value, str):
        if len(value) <= SHOWN_MAX:
            return value if not quote and value.isprintable() else repr(value)
        return f"{value[:SHOWN_HEAD]!r}… ({len(value)} characters)"
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's digit limit for str()
        return f"<{type(value).__name__} too large to show>"
    if len(text) <= SHOWN_MAX:
        return text
    return f"{text[:SHOWN_HEAD]}… ({len(text)} characters)"


def printable(text: object) -> str:
    """Text that came from outside (a path, a cell folder's name, a wheel's metadata, another program's
    message), safe to put inside one output line: every character `str.isprintable` refuses (line breaks,
    CR, TAB, ESC and the other C0/C1 controls, U+2028, a lone surrogate of a non-UTF-8 name) is written as
    `repr` writes it (`\\n`, `\\x1b`, `\\udcff`), the rest as it is. So no such text ends a line, starts a
    second one that a CI runner reads as a workflow command (`::warning::`), or recolours the terminal;
    `shown` quotes values by the same rule. A text that itself starts with `::` (a whole printed line of
    outside text) has its first colon written `\\x3a`, so it cannot be read as a workflow command either."""
    text = str(text)
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    start = len(text) - len(text.lstrip())  # the runner reads a command after leading blanks too
    return f"{text[:start]}\\x3a{text[start + 1 :]}" if text.startswith("::", start) else text


def markdown_cell(text: object) -> str:
    """Outside text (a cell id, an error message, a path) inside a Markdown table cell or line: `&`, `<` and
    `>` as HTML entities, so that no raw HTML (a `<details>`, an `<img>`) reaches the rendered report; `|`
    escaped, so it stays in its cell; line breaks as spaces, so the row stays one row."""
    text = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def markdown_code(text: object) -> str:
    """Outside text as a Markdown code span: inside one, HTML is shown as text; a backtick in the text
    (which would end the span) is written as an apostrophe, a line break as a space."""
    return "`" + printable(str(text).replace("`", "'")) + "`"


def bounded(message: str) -> str:
    """Every line of `message` cut to LINE_MAX characters, saying how much was left out."""
    lines = []
    for line in message.split("\n"):
        if len(line) > LINE_MAX:
            line = f"{line[:LINE_MAX]}… ({len(line) - LINE_MAX} more characters)"
        lines.append(line)
    return "\n".join(lines)


def closest(word: str, choices: Iterable[str], *, n: int = 1) -> list[str]:
    """The choices a user most likely meant by `word`, best first (empty when none is close).

    Version numbers (`12.5`, `2.6.99`) get the numerically nearest choice (the newer one on a tie);
    names get difflib's closest spelling, ignoring case.
    """
    choices = list(dict.fromkeys(choices))
    if not choices or len(word) > _SUGGEST_MAX:
        return []
    if _DOTTED.fullmatch(word) and all(_DOTTED.fullmatch(c) for c in choices):
        target = _numbers(word)

        def distance(choice: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
            key = _numbers(choice)
            gap = tuple(abs(a - b) for a, b in zip(key, target, strict=False))
            return gap, tuple(-k for k in key)  # a tie goes to the newer version

        return sorted(choices, key=distance)[:n]
    by_lower: dict[str, str] = {}
    for choice in choices:
        by_lower.setdefault(choice.lower(), choice)
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=n, cutoff=0.6)
    return [by_lower[c] for c in close]


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 1) -> str | None:
    """`did you mean 'python'?` (or `'a' or 'b'`), or None when nothing is close."""
    close = closest(word, choices, n=n)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else None


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))
