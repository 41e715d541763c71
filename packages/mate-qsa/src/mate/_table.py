"""Terminal output for the CLI: rich tables when rich is importable, plain text otherwise."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from typing import Any

try:  # mate-qsa depends on rich; a bare source checkout may not have it.
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
except ImportError:  # pragma: no cover - exercised only without rich
    Console = None  # type: ignore[assignment,misc]
    Table = None  # type: ignore[assignment,misc]
    Text = None  # type: ignore[assignment,misc]

__all__ = ["Printer"]


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


class Printer:
    """Prints titled tables and lines to ``file`` (stdout by default)."""

    def __init__(self, file: Any = None) -> None:
        self.file = file if file is not None else sys.stdout
        self._console = None
        if Console is not None:
            # Not a terminal (pipes, tests): a wide fixed width keeps cells unwrapped.
            width = shutil.get_terminal_size((120, 24)).columns
            self._console = Console(file=self.file, width=max(width, 100), highlight=False, soft_wrap=True)

    def line(self, text: str = "") -> None:
        if self._console is not None:
            self._console.print(text, markup=False)
        else:
            print(text, file=self.file)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        cells = [[_text(v) for v in row] for row in rows]
        if self._console is not None:
            # Text objects: cells like "[rows, keys]" must not be parsed as rich markup.
            table = Table(title=Text(title), title_justify="left")
            for col in columns:
                table.add_column(col, overflow="fold")
            for row in cells:
                table.add_row(*(Text(v) for v in row))
            self._console.print(table)
            return
        widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)]
        print(title, file=self.file)
        print("  ".join(c.ljust(w) for c, w in zip(columns, widths)), file=self.file)
        for row in cells:
            print("  ".join(v.ljust(w) for v, w in zip(row, widths)), file=self.file)
        print(file=self.file)

    def mapping(self, title: str, items: dict[str, Any]) -> None:
        self.table(title, ("item", "value"), [(k, v) for k, v in items.items()])
