"""The operators over the eddy's output: projection, aggregation, ORDER BY, LIMIT, and DuckDB for
the rest."""
