"""The one registry of built-in scalar expressions: sqlglot node type or function name ->
the compiler that turns such a node into a :mod:`eddies.router.expressions` tree.

Every operator and built-in function is registered once, by the family module that
implements it (:mod:`~eddies.engine.expr.operators`, :mod:`~eddies.engine.expr.casts`,
the modules of :mod:`eddies.engine.expr.functions`), with :func:`register` or
:func:`register_kernels`; :mod:`eddies.engine.expr.compile` walks the sqlglot tree and
looks each node up here. A key registered twice is an error at import, so two families
cannot both claim a construct.

Node types are looked up along the node's class hierarchy (a ``TryCast`` finds the
``Cast`` compiler, a ``ConcatWs`` its own before ``Concat``'s); function names are for
``exp.Anonymous`` calls, the functions sqlglot has no node type for, in lower case.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from eddies.router.expressions import Call, Expr


@dataclass(frozen=True, slots=True)
class Site:
    """Where a node is being compiled: the node, its SQL text (rendered only when shown) and
    ``compile``, which compiles one of its operands in the same scope."""

    node: Any
    sql: Any
    compile: Callable[[exp.Expression], Expr]

    def ops(self, *names: str) -> list[Expr]:
        """The node's operands under ``names`` (its sqlglot arg keys) that are set, compiled
        in that order."""
        args = self.node.args
        return [self.compile(args[k]) for k in names if args.get(k) is not None]

    def this_and_expressions(self) -> list[Expr]:
        """The operands of a plain function call: ``this`` (when set), then ``expressions``."""
        node = self.node
        operands = [node.this, *node.expressions] if node.this is not None else node.expressions
        return [self.compile(o) for o in operands]

    def arguments(self) -> list[Expr]:
        """The arguments of an ``exp.Anonymous`` call, compiled in order."""
        return [self.compile(e) for e in self.node.expressions]

    def call(self, kernel: Callable[..., Any], operands: list[Expr]) -> Call:
        """``kernel`` over ``operands``, named by this node's SQL."""
        return Call(kernel, operands, self.sql)


#: A compiler: (the node, its :class:`Site`) -> the compiled expression. It raises an
#: :class:`~eddies.errors.UnsupportedQueryError` naming the construct it refuses.
Compiler = Callable[[Any, Site], Expr]

_BY_NODE: dict[type, Compiler] = {}
_BY_NAME: dict[str, Compiler] = {}


def register(*keys: type | str) -> Callable[[Compiler], Compiler]:
    """A decorator registering a compiler under sqlglot node types and/or lower-case names
    of ``exp.Anonymous`` functions. ValueError if a key is registered already."""

    def add(compiler: Compiler) -> Compiler:
        for key in keys:
            table: dict[Any, Compiler] = _BY_NAME if isinstance(key, str) else _BY_NODE
            if key in table:
                raise ValueError(f"{key!r} has a compiler already: {table[key]!r}")
            table[key] = compiler
        return compiler

    return add


def register_kernels(kernels: Mapping[type, Callable[..., Any]]) -> None:
    """Register plain function calls: each node type's kernel over the call's operands
    (``this``, then ``expressions``), one value per row."""
    for node_type, kernel in kernels.items():
        register(node_type)(lambda node, site, k=kernel: site.call(k, site.this_and_expressions()))


def lookup(node: exp.Expression) -> Compiler | None:
    """The compiler registered for ``node`` (by name for an ``exp.Anonymous``, else by the
    nearest registered class of its hierarchy), or None."""
    if isinstance(node, exp.Anonymous):
        return _BY_NAME.get(str(node.this).lower())
    for cls in type(node).__mro__:
        compiler = _BY_NODE.get(cls)
        if compiler is not None:
            return compiler
    return None
