"""Workspaces on git: each call's directory P and what the run records about it."""
