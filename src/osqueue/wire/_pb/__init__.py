"""Code generated from proto/osqueue/v1/queue.proto by osqueue.wire.codegen; do not edit."""
