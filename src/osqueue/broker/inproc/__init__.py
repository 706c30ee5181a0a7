"""The in-process client: a broker's own QueueClient, its schedule and
segment calls, claimed jobs made ready."""
