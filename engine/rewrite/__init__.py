"""Rewrites of the checked sqlglot tree into forms the planner takes, one rewrite a module."""
