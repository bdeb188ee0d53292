"""The run process's Trio actors: each owns its state and talks over memory channels."""
