"""Continuous queries: incremental aggregates, commit points, sinks, durable state, a query in its
own thread."""
