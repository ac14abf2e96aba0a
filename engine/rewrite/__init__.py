"""Rewrites of the sqlglot tree into forms the planner takes, one rewrite a module.

**The pure rules.** The rewrites that are tree → tree steps (no catalog, no query run) are
declared once, in :data:`RULES`, in the order a statement meets them, each with the
:class:`Stage` of the statement's life where it runs; :func:`apply` runs one stage's
rules in that order (as sqlglot's optimizer declares its ``RULES``). Each rule changes
the tree in place or returns a new one, and raises what its module says.

1. :func:`~eddies.engine.rewrite.quantified.rewrite_quantified`, ``Stage.PARSED``
   (frontend/parse.py): ``x op ANY/ALL (q)`` into IN / NOT IN or scalar subqueries. On the
   tree sqlglot parsed, *before* the allow-list, which has no ANY/ALL: a shape this rule
   leaves is refused there.
2. :func:`~eddies.engine.rewrite.unshadow.unshadow`, ``Stage.CHECKED`` (frontend/parse.py):
   a subquery's own ``t`` gets a name of its own. *After* the allow-list and the FROM-item
   check, whose messages quote the user's aliases; *before* every rewrite that moves
   subquery parts next to the outer query's (rule 4 and all of composite.py's).
3. :func:`~eddies.engine.rewrite.or_factoring.factor_ors`, ``Stage.CHECKED``
   (frontend/parse.py): the conjuncts common to every branch of an OR taken out of it,
   ``(A AND B) OR (A AND C)`` into ``A AND (B OR C)``, in every SELECT's WHERE, ON and
   HAVING, so an equi-join written in each branch (TPC-H Q19) becomes a SteM probe key.
   *Before* the planner splits WHERE into predicates; on the checked tree, so every block
   composite.py runs and every eddy query it derives (parsed again) meets it. The
   single-table filters such ORs imply need the catalog: the planner derives them
   (engine/plan/query_graph_build.py).
4. :func:`~eddies.engine.rewrite.values_rows.values_as_selects`, ``Stage.PART``
   (execution/composite.py, on each statement part it runs): VALUES lists into UNION ALLs
   of one-row SELECTs. *Before* composite.py gives each SELECT without FROM its one-row
   table (these SELECTs are such) and before :mod:`~eddies.engine.rewrite.subquery_merge`
   (a VALUES derived table becomes a derived SELECT).

**The other rewrites** need the catalog, run subqueries, or split a block between the
eddy and DuckDB, so they stay where they are called, composite.py's ``_emit``, in this
order after rule 4:

- :func:`~eddies.engine.rewrite.subquery_merge.merge`: reads the catalog's column names
  (sqlglot's ``qualify``) to merge derived tables and CTEs into the block;
- :mod:`~eddies.engine.rewrite.membership_bodies`: [NOT] IN / EXISTS bodies that are not
  a filter, some run first as queries of their own (``composite._membership_bodies``);
- :func:`~eddies.engine.rewrite.decorrelate.membership_counts` (reads the catalog's
  columns), then :func:`~eddies.engine.rewrite.decorrelate.decorrelate` (the catalog and
  fresh names; the derived tables it adds are then run);
- engine/plan/having_split.py and engine/plan/window_split.py split a block between the
  eddy and DuckDB above it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from sqlglot import exp

from eddies.engine.rewrite.or_factoring import factor_ors
from eddies.engine.rewrite.quantified import rewrite_quantified
from eddies.engine.rewrite.unshadow import unshadow
from eddies.engine.rewrite.values_rows import values_as_selects

#: A pure rewrite: the tree (changed in place) or the tree that replaces it.
Rule = Callable[[exp.Expression], exp.Expression]


class Stage(enum.Enum):
    """Where in a statement's life a rule of :data:`RULES` runs."""

    #: The tree sqlglot parsed, before the allow-list checks it (frontend/parse.py).
    PARSED = "parsed"
    #: The checked statement, before it is cached and handed on (frontend/parse.py).
    CHECKED = "checked"
    #: Each statement part composite.py runs, before its catalog rewrites.
    PART = "part"


#: The pure rewrites in the order a statement meets them (the module docstring says why
#: each stands where it does).
RULES: tuple[tuple[Stage, Rule], ...] = (
    (Stage.PARSED, rewrite_quantified),
    (Stage.CHECKED, unshadow),
    (Stage.CHECKED, factor_ors),
    (Stage.PART, values_as_selects),
)


def apply(tree: exp.Expression, stage: Stage) -> exp.Expression:
    """``tree`` through the rules of :data:`RULES` for ``stage``, in their order; returns
    the rewritten tree (``tree`` itself when every rule changed it in place). Raises what
    the rules raise (SqlSyntaxError for VALUES rows of different lengths)."""
    for rule_stage, rule in RULES:
        if rule_stage is stage:
            tree = rule(tree)
    return tree
