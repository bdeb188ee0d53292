"""Workspaces on git: the run's repository, the placer and each call's directory P.

Import from the submodules (`crw.workspace.repo`, `crw.workspace.placer`, ...), not
from this package.
"""
