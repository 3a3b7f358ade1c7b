"""An SGLang-shaped KV-event publisher for the interop test (Debian python3-zmq, python3-msgpack).

Frames and replay follow sglang python/sglang/srt/utils/event_publisher.py (ZmqEventPublisher):
[topic, seq (8 bytes big-endian), msgpack [ts, events, attn_dp_rank]] on the PUB side; a ROUTER
reads [identity, "", start_seq] and answers [identity, "", seq, payload] per buffered batch with
seq >= start_seq, then [identity, "", -1 (8 signed bytes), ""].

The PUB socket is an XPUB: the same frames to a SUB, but it lets this script see the
subscription arrive before it publishes (a PUB drops what it sends before a subscriber joins).

Prints "PUB <endpoint>" and "REPLAY <endpoint>", waits for a subscriber, publishes the scenario
(batch 2 is buffered but not sent: the subscriber must replay it), then serves replay requests
until stdin closes.
"""

import sys
import time

import msgpack
import zmq

TOPIC = b"kv"
END_SEQ = (-1).to_bytes(8, "big", signed=True)

# Both event shapes: tagged arrays (6, 7 and 8 elements; older SGLang) and, since sglang PR
# #37482, maps with a "type" field. Hashes span signed and unsigned 64-bit encodings.
BATCHES = [
    [["BlockStored", [1, 2, 3], None, [1, 2, 3, 4, 5, 6], 2, None]],
    [
        ["BlockStored", [-5, 2**63 + 11], 3, [7, 8, 9, 10], 2, None, "GPU"],
        ["BlockRemoved", [2], "GPU"],
    ],
    [  # lost on the PUB side, recovered by replay
        {"type": "BlockStored", "block_hashes": [40, 41], "parent_block_hash": None,
         "token_ids": [1, 1, 2, 2], "block_size": 2, "lora_id": None, "medium": "GPU",
         "cache_salt": "tenant-a", "session_id": "s-1", "unknown_future_field": [1, {"x": 2}]},
        {"type": "BlockRemoved", "block_hashes": [1], "medium": "GPU"},
    ],
    [
        ["BlockStored", [50], 41, [5, 5], 2, None, "GPU", {"cache_salt": "tenant-a"}],
        {"type": "SomeFutureEvent", "x": 1},
        {"type": "BlockRemoved", "block_hashes": [3]},
    ],
]
LOST = {2}


def main():
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.XPUB)
    pub.bind("tcp://127.0.0.1:*")
    router = ctx.socket(zmq.ROUTER)
    router.bind("tcp://127.0.0.1:*")
    print("PUB", pub.getsockopt(zmq.LAST_ENDPOINT).decode(), flush=True)
    print("REPLAY", router.getsockopt(zmq.LAST_ENDPOINT).decode(), flush=True)

    if not pub.poll(30_000):
        sys.exit("no subscriber within 30 s")
    sub = pub.recv()
    if sub[:1] != b"\x01" or not TOPIC.startswith(sub[1:]):
        sys.exit("unexpected subscription %r" % sub)

    buffer = []
    for seq, events in enumerate(BATCHES):
        payload = msgpack.packb([time.time(), events, 0])
        buffer.append((seq, payload))
        if seq not in LOST:
            pub.send_multipart((TOPIC, seq.to_bytes(8, "big"), payload))

    poller = zmq.Poller()
    poller.register(router, zmq.POLLIN)
    poller.register(sys.stdin.fileno(), zmq.POLLIN)
    deadline = time.time() + 60
    while time.time() < deadline:
        ready = dict(poller.poll(1000))
        if sys.stdin.fileno() in ready:
            if not sys.stdin.buffer.read1(1):
                break
        if router in ready:
            frame = router.recv_multipart()
            if len(frame) != 3:
                continue
            client_id, _, start = frame
            start_seq = int.from_bytes(start, "big")
            for seq, buf in buffer:
                if seq >= start_seq:
                    router.send_multipart((client_id, b"", seq.to_bytes(8, "big"), buf))
            router.send_multipart((client_id, b"", END_SEQ, b""))
    pub.close(linger=0)
    router.close(linger=0)


if __name__ == "__main__":
    main()
