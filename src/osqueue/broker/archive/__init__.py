"""The archive: finished jobs written out as objects, and the task that writes them."""
