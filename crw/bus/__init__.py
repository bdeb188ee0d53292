"""The step bus: steps, packets, the inbox and replies."""
