"""The commands that read a run and change nothing: `status`, `call`, `list`, `show`,
`watch`, `timeline`, `shadow`, and `crw schema rows`.

`commands.py` is their face in the command tree. They read the run directory
only, never a lock a run process would wait for.
"""
