"""Studies: the study file and its run plans, regimes, preconditions and gates, verdict rules, the pilot rule, the study report."""
