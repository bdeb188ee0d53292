"""What a run is configured with: the workflow file, and the role store, read and checked.

Every error is one line naming the file, the line and the key, and how to fix it.
It reads files and decides; it never writes a run, starts a process or talks to a host.
"""
