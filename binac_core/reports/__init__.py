"""Reports: the measures, a step's metrics, the comparison report, plots, critic health."""
