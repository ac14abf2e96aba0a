"""SQL text to a checked sqlglot tree: parsing, and the one allow-list of constructs eddies runs."""
