"""What every floor of the library uses: the typed config, stage files, statistics, the workspace, fault points, code provenance. It imports no other binac_core folder."""
