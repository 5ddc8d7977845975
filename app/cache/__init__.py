"""The exact-match response cache: a run that ended `ok`, kept as its canonical events, replayed as
the same stream for the same request.

- `config.py`: the operator's `[[cache]]` rules (which models or routes, TTL, scope, pacing, billing).
- `key.py`: the digest of everything that decides an answer, scoped to the caller's key.
- `entry.py`: a cached run (its events and final) and its checked byte form (corrupt: a miss).
- `store.py`: where entries live: memory (bounded LRU) or Redis (TTL, bounded), beside the streams.
- `replay.py`: the run a hit starts: the cached events through the request's gate into a new log.
- `service.py`: `ResponseCache`, what the opener and the gateway call: look up, collapse, keep.
"""
