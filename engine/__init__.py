"""eddies.engine."""
