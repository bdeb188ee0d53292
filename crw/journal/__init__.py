"""The journal: the row catalogue, the journal file and its framing, and replay."""
