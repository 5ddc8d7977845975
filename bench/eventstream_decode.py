"""CPU per frame of the AWS event-stream decoders against the SSE decoder (why app/providers/
eventstream.py is not botocore's EventStreamBuffer): one Bedrock `contentBlockDelta` frame and the
equivalent Anthropic SSE event, 20 to a read, interleaved rounds. `python bench/eventstream_decode.py`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from botocore.eventstream import EventStreamBuffer
from scripts.build_cloud_fixtures import encode_frame

from app.providers.eventstream import EventStreamDecoder
from app.providers.sse import SSEDecoder

FRAME = encode_frame({":event-type": "contentBlockDelta", ":content-type": "application/json",
                      ":message-type": "event"},
                     json.dumps({"contentBlockIndex": 0, "delta": {"text": "hello world "}, "p": "abcdefgh"}).encode())
SSE = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
       b'"delta":{"type":"text_delta","text":"hello world "}}\n\n')


class Botocore:
    def __init__(self) -> None:
        self.buffer = EventStreamBuffer()

    def feed(self, data: bytes) -> list[object]:
        self.buffer.add_data(data)
        return list(self.buffer)


def main(rounds: int = 3, reads: int = 1500, per_read: int = 20) -> None:
    results: dict[str, list[float]] = {}
    for _ in range(rounds):
        for label, unit, make in (("botocore EventStreamBuffer", FRAME, Botocore),
                                  ("eventstream.EventStreamDecoder", FRAME, EventStreamDecoder),
                                  ("sse.SSEDecoder", SSE, SSEDecoder)):
            decoder, body = make(), unit * per_read
            start = time.process_time()
            for _ in range(reads):
                decoder.feed(body)
            results.setdefault(label, []).append((time.process_time() - start) / (reads * per_read) * 1e6)
    for label, values in results.items():
        print(f"{label:32s} {min(values):6.1f} us CPU per frame (best of {rounds})")


if __name__ == "__main__":
    main()
