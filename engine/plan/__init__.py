"""Query to plan, without trio: AMs, SMs, SteMs, join steps, pushdown, the plan cache and
explain()."""
