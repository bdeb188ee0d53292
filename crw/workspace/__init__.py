"""Workspaces on git: the placer and each call's directory P, its worktree, the
commits and refs a call leaves. The run's repository and head, which a workflow
file names, are decided below this package (`crw.engine.config.repo`).

Import from the submodules (`crw.workspace.placer`, `crw.workspace.worktrees`,
...), not from this package.
"""
