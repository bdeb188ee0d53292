"""What the operator commands show from a run's rows: status and list (run_view),
show and watch (row_lines), the timeline, and the shadow replay.

Pure formatters and judgements over rows; they never write.
"""
