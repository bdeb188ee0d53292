"""Which calls run (spec: Attempts, restarts and continuations): admission, the
attempts a call gets, the lost rule, continuations, a reviewed node's rounds, and
where a call goes on after a restart.

Pure: the workflow and the replayed rows in, decisions out.
"""
