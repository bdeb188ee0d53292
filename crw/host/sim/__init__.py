"""The simulated host: a Codex app-server look-alike for tests and the demo."""
