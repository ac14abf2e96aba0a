"""Scalar expressions: sqlglot trees compiled into router.expressions trees (types, casts,
functions)."""
