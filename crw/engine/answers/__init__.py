"""The harvest (spec: The harvest): one ended turn in, the call's end out: the
answer found and parsed, its schema check in bounded CPU time, the repair, the
tokens, what a failed turn does.

Pure but for the CPU budget's watchdog; it never reads the host itself.
"""
