"""The Redis stream store: streams every replica can replay, follow, cancel and outlive.

Chosen by `FOUNDRY_REDIS_URL`. The parts, each over one Redis client:

  store.py     `RedisStreamStore` (and its `RedisStoreSettings`): the store the gateway sees. It
               serves this replica's streams from a `MemoryStreamStore`, the others' from Redis,
               and composes the parts below.
  link.py      what the parts share: the client, the key layout (`Keys`), timed operations judged
               with the loop's lag, and the end of a stream whose writer is gone, written once.
  owner.py     the replica running a stream: writes its frames to Redis behind the live path,
               renews this replica's lease, pops the cancels sent to it, writes back what a Redis
               restarted empty lost.      keys: {id}:events, {id}:meta, {id}:transcript, lease, cancel
  follower.py  any other replica: replays and follows a stream from Redis, queues cancels for its
               owner, and ends (claims) a stream whose owner's lease is gone.   reads those keys
  outbox.py    the run records that travel with each final, until the records database holds them;
               sweeps the outboxes of replicas that are gone.            keys: outbox, replicas

How a stream flows: the owner's run appends to its in-memory log; the log's sink hands each frame
to the owner's one background writer, which appends many streams per pipelined round trip to
`{id}:events`; a frame is released to readers once Redis holds it (`StreamLog.gate`). A follower
on another replica XREADs `{id}:events` from its cursor and relays the stored frames as they are.
When the owner dies its lease expires, and the first follower (or outbox sweeper) to notice
appends the final and hands the run on to be recorded (the store's `on_claim`).

Keys (`{id}` is the stream id, in braces so a stream's keys share a cluster slot):
  foundry:{id}:events      a Redis Stream. One entry per stream per write: field `f` holds the
                           encoded SSE frames of events `s`..<seq> (the entry id is `<seq>-0`,
                           our last event id), `e` marks the entry ending with the final. Trimmed
                           like the memory log (MINID: what memory no longer retains goes),
                           expired `stream_ttl_seconds` after the final.
  foundry:{id}:meta        hash: model, provider, created_at, owner (the replica), key, request and
                           slot (for the run's record and its key's slot if the owner dies), and
                           done/status at the end; `record` (the run's record) with the final.
  foundry:{id}:transcript  the transcript snapshot as JSON (at most once a second, and at the end).
  foundry:lease:{<replica>}  the owner's lease, renewed every lease/3, expiring after the lease.
  foundry:cancel:{<replica>} a list of the ids of its streams to cancel, sent by other replicas
                           (RPUSH) and popped by the owner (BLPOP); it expires with the lease.
  foundry:outbox:{<replica>} the ids of its streams whose run record the records database does not
                           hold yet.
  foundry:replicas         every replica seen (a sorted set), for the outbox sweepers.

Every key carries a hash tag, so on a Redis Cluster (`redis+cluster://` URL, app/redis_client.py)
each command and each Lua script touches one slot; a batch of writes for many streams is one
pipeline that redis-py's cluster client splits by node.
"""

from app.streams.redis.store import RedisStoreSettings, RedisStreamStore

__all__ = ["RedisStoreSettings", "RedisStreamStore"]
