"""A step and its subagent (spec: The step; dispatch report, replies and the binding
rule; the bind rows): the spawn message and the task packet, whose step a
subagent's message carries, the reply to a report, the bind.

Pure: rows, reports and host snapshots in, rows and replies out; it writes no file.
"""
