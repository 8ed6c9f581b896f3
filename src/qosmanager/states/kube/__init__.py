"""The Kubernetes source: state from the API server, the Eviction API and Events.

A small client on the standard library (:mod:`.client`, configured by :mod:`.config`), three
reflectors feeding the :class:`~qosmanager.states.store.StateStore` (:mod:`.source`), the
coordinator's ``api`` eviction callable (:mod:`.evict`) and the event recorder (:mod:`.events`).
Nothing here is imported in standalone mode.
"""
