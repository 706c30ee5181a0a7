"""``python -m osqueue.cli``: the same as the ``osqueue`` command."""

from osqueue.cli.app import main

main()
