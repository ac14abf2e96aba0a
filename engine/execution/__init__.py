"""Plan to trio tasks: lowering a plan into the eddy and its modules, and composite queries."""
