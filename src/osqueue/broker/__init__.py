"""The broker: group commit, lease and takeover, long polls, archive, payload sweep."""

from osqueue.broker.config import BrokerConfig
from osqueue.broker.core.broker import Broker
from osqueue.broker.core.lifecycle import State
from osqueue.broker.observe.counters import BrokerCounters

__all__ = ["Broker", "BrokerConfig", "BrokerCounters", "State"]
