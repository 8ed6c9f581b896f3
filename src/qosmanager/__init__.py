"""qosmanager: a node-level QoS agent for Kubernetes colocation."""

__version__ = "0.1.0"
