"""The host: the Codex app-server protocol, its client and the simulated host."""
