"""The process around a query: logging, the trio clock, garbage collection and malloc tuning."""
