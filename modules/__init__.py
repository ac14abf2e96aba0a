"""The eddy's modules: scan and index AMs, SMs, SteMs (``stem/``), STAIRs (``stair/``),
join steps, windows and the output (eddies-2000 §3, stems-2003 §2, stairs-2004 §3).
"""
