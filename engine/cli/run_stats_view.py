"""How the command line shows a run's statistics: the report of RunStats.format(), framed.

The report itself — which sections, which columns, what each module does in words — is
:mod:`eddies.router.stats_report`, the one renderer ``RunStats.format()``, ``eddies query
--stats`` and ``eddies demo`` share. This module adds the command line's framing only:
bold section titles and dim notes on a rich console, and a glossary of the papers' terms.
The characters printed are those of ``stats.format(summary=False)`` (the result's footer
already gave the rows and the elapsed time), followed by the glossary.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from eddies.router.stats import RunStats
from eddies.router.stats_report import report_sections

__all__ = ["GLOSSARY", "print_glossary", "print_run_stats"]

#: One line per term, printed under the statistics (the papers' vocabulary).
GLOSSARY = (
    ("eddy", "the router: sends each tuple to the next module, learning the order as it runs"),
    ("AM", "access module: reads a table (a scan, or an index that looks rows up by key)"),
    ("SM", "selection module: one WHERE predicate; tuples that fail it are dropped"),
    ("SteM", "state module: a table's rows seen so far; build adds rows, probe joins"),
    ("signature", "span (the aliases a tuple covers) + done (the predicates it passed)"),
)


def print_run_stats(console: Console, stats: RunStats) -> None:
    """Print the report of ``stats`` (without its summary line) and the glossary.

    Lines are printed whole (``soft_wrap``): a table wider than the console runs on
    rather than folding into the next row.
    """
    for i, section in enumerate(report_sections(stats, summary=False)):
        if i:
            console.print()
        if section.title:
            console.print(Text(section.title, style="bold"), soft_wrap=True)
        for line in section.lines:
            console.print(Text(line), soft_wrap=True)
        for note in section.notes:
            console.print(Text(note, style="dim"), soft_wrap=True)
    console.print()
    print_glossary(console)


def print_glossary(console: Console) -> None:
    """The papers' terms the statistics use, one per line."""
    glossary = Table.grid(padding=(0, 2))
    glossary.add_column(no_wrap=True, style="bold")
    glossary.add_column()
    for term, meaning in GLOSSARY:
        glossary.add_row(term, meaning)
    console.print(Text("glossary", style="italic"))
    console.print(glossary)
