"""The broker: group commit, lease and takeover, long polls, archive, payload sweep."""

from osqueue.broker.activity import BrokerCounters
from osqueue.broker.broker import Broker
from osqueue.broker.config import BrokerConfig
from osqueue.broker.lifecycle import State

__all__ = ["Broker", "BrokerConfig", "BrokerCounters", "State"]
