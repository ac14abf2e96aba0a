"""eddies.router."""
