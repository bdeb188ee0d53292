"""Pauses, cancellations and deadlines reaching a call; held calls and a person's
decisions on them (retry, skip, abort, restart); a node restarted afresh.

Pure: a call's rows and host snapshots in, rows and actions out.
"""
