"""The engine around the calls: run directory, run spec, workflow and role files, locks."""
