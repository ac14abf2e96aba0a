"""Built-in SQL functions by family (strings, numbers, dates, event-time windows,
conditionals, decorrelated scalar subqueries); each module registers its own in
:mod:`eddies.engine.expr.registry`."""
