"""The lease: holding it (reads, standby, takeover, resolving a failed write)
and judging another broker's."""
