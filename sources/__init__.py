"""eddies.sources."""
