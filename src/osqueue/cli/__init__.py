"""The ``osqueue`` command line (``osqueue.cli.app:main``)."""
