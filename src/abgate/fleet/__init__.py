"""One A/B sharded over a fleet of engine replicas on Ray (issue 33).

``cluster``: the ``--cluster`` / ``[cluster]`` spec and the Ray connection (``ray``
imported lazily, ``abgate[ray]``); ``replica``: the replica actor, one engine session
per arm; ``coordinator``: the A/B strategy that shards items (never arms) over the
replicas, streams every sample to the one writer and re-queues a lost replica's items.
"""
