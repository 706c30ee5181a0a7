"""What the broker tells about itself: counters, the activity log, the Prometheus collector."""
