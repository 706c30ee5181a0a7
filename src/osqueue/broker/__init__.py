"""The broker: group commit, lease and takeover, archive."""

from osqueue.broker.broker import Broker, BrokerCounters, State
from osqueue.broker.config import BrokerConfig

__all__ = ["Broker", "BrokerConfig", "BrokerCounters", "State"]
