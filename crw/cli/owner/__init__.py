"""The owner thread's commands: `crw flow next` (with the role store's pairs it
reads), `crw flow dispatched`, and the spawn hook (`crw flow hook spawn` and
`install`).

`commands.py` and `hook_app.py` are their face in the command tree. `next` runs
mostly without the tree (`crw.cli.hot`): its imports stay light.
"""
