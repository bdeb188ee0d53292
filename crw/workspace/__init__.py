"""Git workspaces of a run (pygit2): import from the submodules."""
