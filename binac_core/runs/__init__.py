"""Running: argument checks before compute (`plans.py`), the run lock and flow-run claim, process groups."""
