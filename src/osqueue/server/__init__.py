"""The gRPC service over the broker: servicer, auth, limits, and the server runner."""
