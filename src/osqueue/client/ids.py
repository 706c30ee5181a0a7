"""Client-chosen job ids (re-exported from :mod:`osqueue.ids`)."""

from osqueue.ids import new_id

__all__ = ["new_id"]
