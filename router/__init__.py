"""The eddy itself: one trio task routing TupleBatches among the modules by their
signatures and Ready/Done bits, the routing table, the policies (``policies/``), the
observed estimates and a run's statistics (eddies-2000 §3-4, stems-2003 §3).
"""
