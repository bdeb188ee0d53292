"""What the owner is told (spec: crw flow next; waking the owner; the six session
facts): next's answer, its hint and warnings, the wakes, the start preview.

Pure: what a command read in, what it says out; it records nothing.
"""
