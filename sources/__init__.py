"""Where tuples come from: Arrow tables, files and datasets, streams pushed from other
threads, web sources, and the per-table row stores the eddy's row ids point into.
"""
