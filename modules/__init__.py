"""eddies.modules."""
