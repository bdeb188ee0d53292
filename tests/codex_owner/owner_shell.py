"""The `crw` the owner's shell finds first on its PATH: a small script that has the
worker's fork server (tests/zygote.py) run the command, as `Crw` has it run a
test's own commands.

The owner's model runs `crw flow start`, `next` and `dispatched` in the owner
thread's shell, a score of commands a test, each of which was a fresh `python -m
crw` whose start-up (the interpreter, crw's imports) was most of its CPU. The
script passes its own stdin, stdout and stderr (the descriptors codex's shell
gave it), its argv, environment, working directory and umask to the server,
which forks a child that runs the command as `python -m crw` does; it forwards
SIGTERM, SIGINT and SIGHUP to that child and exits with its code (dies of its
signal). What the owner's shell reads is the command's own output, written to
the shell's own descriptors.

It runs the real `crw` instead (exec, the same argv) when the server is gone or
when its environment differs from the server's in what an interpreter takes at
its start (a fork cannot give a child that): the `PYTHON*` variables and `TZ`, as
tests/zygote.py has them, and the locale the interpreter sets, `LC_CTYPE`'s (from
`LC_ALL`, else `LC_CTYPE`, else `LANG`). tests/zygote.py compares `LANG` and every
`LC_*` itself; here the category is compared, as codex's shell sets `LC_ALL` and
`LC_CTYPE` to the `C.UTF-8` the server's `LANG` gives: crw never calls
`setlocale`, so `LC_CTYPE` is the only category a command takes from them.
`python -S -E`: the script needs the standard library only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

READ = ("PYTHON", "TZ", "LC_ALL", "LC_CTYPE", "LANG")
"""The variables whose start-up meaning the script compares (module docstring)."""

SCRIPT = """\
import json, os, signal, socket, sys

SERVER = {server}
REAL = {real}
SERVER_ENV = {server_env}


def cold():
    os.execv(REAL, [REAL, *sys.argv[1:]])


def at_start(env):
    taken = {{k: v for k, v in env.items() if k.startswith(("PYTHON", "TZ"))}}
    return taken, env.get("LC_ALL") or env.get("LC_CTYPE") or env.get("LANG") or ""


if at_start(os.environ) != at_start(SERVER_ENV):
    cold()
umask = os.umask(0o077)
os.umask(umask)
asked = {{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(), "umask": umask}}
conn = socket.socket(socket.AF_UNIX)
try:
    conn.connect(SERVER)
    socket.send_fds(conn, [json.dumps(asked).encode()], [0, 1, 2])
except OSError:
    cold()
answers = conn.makefile("rb")
forked = answers.readline()
if not forked:  # the server forked nothing
    cold()
pid = int(forked)


def forward(signum, frame):
    os.kill(pid, signum)


for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, forward)
code = int(answers.readline() or b"1")
if code < 0:
    if -code != signal.SIGKILL:
        signal.signal(-code, signal.SIG_DFL)
    os.kill(os.getpid(), -code)
    sys.exit(128 - code)
sys.exit(code)
"""


def install(
    bin_dir: Path, server: Path, server_env: dict[str, str], real: Path | None = None
) -> Path:
    """Write the script as `bin_dir/crw` for the fork server at `server`, whose
    environment is `server_env`; its path. `real`: the `crw` it runs when it cannot
    fork, by default the one beside this Python."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    real = real or Path(sys.executable).parent / "crw"
    read = {k: v for k, v in server_env.items() if k.startswith(READ)}
    body = SCRIPT.format(
        server=json.dumps(str(server)), real=json.dumps(str(real)), server_env=repr(read)
    )
    script = bin_dir / "crw"
    script.write_text(f"#!{sys.executable} -SE\n{body}")
    script.chmod(0o755)
    return script
