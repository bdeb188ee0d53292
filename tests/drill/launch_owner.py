"""An owner that follows `crw flow next` to the letter, for the launch drill.

It plays as `tests.drill.owner` does, but remembers no step it took: every step
`next` offers is taken, but one marked `reported` (its dispatch report waits in
the inbox, the run answers it) and one whose report it must send again (a
`retry` reply). An answer of `next` that hands out a step the run already has a
subagent for makes it spawn a duplicate, which the drill sees on the host.
"""

from __future__ import annotations

import sys
from typing import Any

import trio

from crw.host.connect import connect_host
from crw.host.uri import parse_host_uri
from tests.drill.owner import Owner, parse


class LiteralOwner(Owner):
    async def take(self, step: dict[str, Any]) -> None:
        if step["action"] == "close":
            await super().take(step)
            return
        if step.get("reported"):
            return
        key = (step["call"], step["k"], step["attempt"])
        if any((s["call"], s["k"], s["attempt"]) == key for s, _ in self.unanswered):
            return
        self.taken.clear()  # forget: the answer of next is all it goes by
        await super().take(step)


async def main(argv: list[str]) -> None:
    args = parse(argv)
    async with connect_host(parse_host_uri(f"unix:{args.socket}")) as client:
        await LiteralOwner(args, client).play()


if __name__ == "__main__":
    trio.run(main, sys.argv[1:])
