"""The simulated host: a Codex app-server look-alike for tests and the demo.

- `state`: threads, turns, items and token counts, and their wire shapes;
- `behaviour`: the `sim/script` rules and the plan of one turn (pure);
- `files`: what a turn does to files in its workspace (`writes`, `commit`, pygit2);
- `rollout`: the rollout files under the host's CODEX_HOME;
- `server`: `SimHost`, one connection's JSON-RPC loop, in-memory and unix-socket
  serving; `serve`: `crw host sim serve --socket PATH`;
- `instance`: a valid instance of a JSON Schema (the default answer).
"""
