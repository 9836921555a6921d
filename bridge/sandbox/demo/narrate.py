"""How the demo talks: numbered steps, each with what happened, what to look at, the commands that show it, and the
checks it made (`ok` or `FAILED`), in plain text that reads the same in a terminal, a CI log or a pipe."""

from __future__ import annotations

import textwrap
import time
from collections.abc import Callable, Sequence

WIDTH = 100


def _wrap(text: str, width: int, initial_indent: str = "", subsequent_indent: str = "") -> list[str]:
    # Paths, commands and names stay whole, so they can be copied from the terminal.
    return textwrap.wrap(text, width, initial_indent=initial_indent, subsequent_indent=subsequent_indent,
                         break_long_words=False, break_on_hyphens=False)


class Narrator:
    def __init__(self, write: Callable[[str], None], *, total_steps: int) -> None:
        self.write = write
        self.total = total_steps
        self.step_no = 0
        self.t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def title(self, text: str) -> None:
        self.write(text)
        self.write("=" * min(WIDTH, len(text)))

    def step(self, title: str) -> None:
        self.step_no += 1
        head = f"Step {self.step_no}/{self.total}  {title}"
        stamp = f"[{self.elapsed():6.1f}s]"
        self.write("")
        self.write(f"{head}{' ' * max(1, WIDTH - len(head) - len(stamp))}{stamp}")
        self.write("-" * WIDTH)

    def say(self, text: str, indent: int = 2) -> None:
        """A paragraph, wrapped."""
        pad = " " * indent
        for line in _wrap(text, WIDTH - indent) or [""]:
            self.write(pad + line)

    def label(self, name: str, text: str) -> None:
        """`  What happened: ...` with the continuation lines indented under the text."""
        first = f"  {name}: "
        lines = _wrap(text, WIDTH, initial_indent=first, subsequent_indent=" " * 4) or [first]
        for line in lines:
            self.write(line)

    def commands(self, *cmds: str) -> None:
        self.write("  Look at it yourself:")
        for c in cmds:
            self.write(f"    $ {c}")

    def block(self, text: str, indent: int = 4, limit: int = 40) -> None:
        """Verbatim output of a command, indented, at most `limit` lines."""
        lines = text.rstrip("\n").splitlines()
        for line in lines[:limit]:
            self.write(" " * indent + line)
        if len(lines) > limit:
            self.write(" " * indent + f"... ({len(lines) - limit} more lines)")

    def table(self, header: Sequence[str], rows: Sequence[Sequence[object]], indent: int = 4) -> None:
        cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
        for n, r in enumerate(cells):
            self.write(" " * indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
            if n == 0:
                self.write(" " * indent + "  ".join("-" * w for w in widths))

    def check(self, ok: bool, text: str) -> None:
        self.write(f"  [{'ok' if ok else 'FAILED'}] {text}")
