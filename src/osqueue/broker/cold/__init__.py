"""The broker's cold objects: segments of ready, delayed and dead jobs, waiting children, the finished record."""
