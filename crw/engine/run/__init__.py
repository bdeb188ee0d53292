"""The run on disk and its processes: the state directory, run.json, the locks, a
detached launch, and why a resume would be refused now.

It reads and writes the run's own files and launches its process; it never
writes a journal row and never talks to the host.
"""
