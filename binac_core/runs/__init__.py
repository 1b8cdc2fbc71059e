"""Run infrastructure: config, argument plans, code provenance, workspace, run lock, faults, studies."""
