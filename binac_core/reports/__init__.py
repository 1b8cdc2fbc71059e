"""Reports: the comparison and study reports, plots, statistics, the study's measures, critic health."""
