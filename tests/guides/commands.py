"""The simple commands inside a guide's shell block, for checking them without running them (pure).

`simple_commands(text)` splits a block the way the shell would at the level that matters here: continuation lines
joined, then commands separated by `;`, `|`, `&&`, `||`, newlines and the keywords of `for`/`until`/`while` loops,
and command substitutions `$( ... )` taken out as commands of their own. Each command is split into words (shlex,
POSIX rules) with `$VAR`, `${VAR}` and `"$VAR"` replaced from the given variables. Enough for the guides' commands,
which avoid shell features they do not need; anything this cannot split raises ValueError naming the text.
"""

from __future__ import annotations

import re
import shlex

_KEYWORDS = ("do", "done", "then", "fi", "else", "until", "while", "if", "for", "in")


def _expand(word: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: variables.get(m.group(1), m.group(0)), word)


def _substitution(text: str) -> tuple[int, int] | None:
    """Start and end (exclusive) of the first innermost `$( ... )` outside single quotes, None when there is none."""
    quote, stack, i = "", [], 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = ""
        elif c == "'":
            quote = c
        elif text.startswith("$(", i):
            stack.append(i)
            i += 2
            continue
        elif c == ")" and stack:
            start = stack.pop()
            inner = text[start + 2:i]
            if "$(" not in inner:
                return start, i + 1
        i += 1
    return None


def simple_commands(text: str, variables: dict[str, str]) -> list[list[str]]:
    joined = re.sub(r"\\\n\s*", " ", text)
    pieces: list[str] = []
    while True:  # innermost substitutions first: each is a command, its place becomes a plain word
        span = _substitution(joined)
        if span is None:
            break
        pieces.append(joined[span[0] + 2:span[1] - 1])
        joined = joined[:span[0]] + "SUBST" + joined[span[1]:]
    pieces.append(joined)
    out: list[list[str]] = []
    for piece in pieces:
        for line in piece.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            # Redirections are not words of the command: `> /dev/null`, `2>&1`, `<<<"$out"`.
            line = re.sub(r"(?<=\s)\d?(?:>>?|<<<|<)(?:&\d|\s*\S+)", " ", line)
            try:
                lexer = shlex.shlex(line, posix=True, punctuation_chars=";|&")
                lexer.whitespace_split = True
                tokens = list(lexer)
            except ValueError as err:
                raise ValueError(f"cannot split {line!r}: {err}") from err
            current: list[str] = []
            skipping = False  # the head of a `for NAME in WORDS` loop is not a command
            for tok in tokens:
                if tok in (";", "|", "&&", "||", "&", ";;"):
                    if current and not skipping:
                        out.append(current)
                    current, skipping = [], False
                    continue
                if not current and tok == "for":
                    skipping = True
                if not current and tok in _KEYWORDS:
                    continue
                current.append(_expand(tok, variables))
            if current and not skipping:
                out.append(current)
    # A bare assignment (NAME=value) is not a command.
    return [c for c in out if not (len(c) == 1 and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", c[0]))]
