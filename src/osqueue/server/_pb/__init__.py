"""Code generated from proto/osqueue/v1/queue.proto by osqueue.server.codegen; do not edit."""
