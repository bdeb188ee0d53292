"""`crw flow ui`: a local web view of the runs under a state directory.

An ASGI app (Starlette) served by Hypercorn's Trio worker on the loopback, its
pages Jinja2 templates (autoescaped), its live updates Server-Sent Events woken
by the runs' journals (the inotify wake `show --follow` uses). It reads runs as
`list` and `status` read them, and its decisions run the very `crw flow`
commands as subprocesses. The top layer: nothing else in crw imports it (the
command tree names it by string).
"""
