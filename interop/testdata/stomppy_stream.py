#!/usr/bin/python3
"""stomp.py (Debian python3-stomp) reading a Herald stream with RabbitMQ's
STOMP stream headers.

Usage: stomppy_stream.py HOST:PORT DEST CONSUMER OFFSET COUNT ACK_OFFSET

Subscribes to DEST with ack:client, x-stream-offset:OFFSET and (unless
CONSUMER is "-") x-stream-consumer:CONSUMER, receives COUNT messages, ACKs
the one at offset ACK_OFFSET (-1: none) with a receipt, and disconnects.
Prints one JSON object: messages (offset, timestamp, body), errors and
receipts. The Go test judges it.
"""

import json
import sys
import threading

import stomp


class Recorder(stomp.ConnectionListener):
    def __init__(self):
        self.cond = threading.Condition()
        self.messages = []
        self.errors = []
        self.receipts = []

    def on_message(self, frame):
        with self.cond:
            self.messages.append(frame)
            self.cond.notify_all()

    def on_error(self, frame):
        with self.cond:
            self.errors.append({"headers": dict(frame.headers), "body": str(frame.body)})
            self.cond.notify_all()

    def on_receipt(self, frame):
        with self.cond:
            self.receipts.append(frame.headers.get("receipt-id"))
            self.cond.notify_all()

    def wait(self, pred, timeout=10.0):
        with self.cond:
            self.cond.wait_for(lambda: pred() or self.errors, timeout)


def main():
    addr, dest, consumer, offset, count, ack_offset = sys.argv[1:7]
    host, port = addr.rsplit(":", 1)
    count, ack_offset = int(count), int(ack_offset)
    conn = stomp.Connection12([(host, int(port))], heartbeats=(0, 0))
    rec = Recorder()
    conn.set_listener("rec", rec)
    conn.connect(wait=True)
    headers = {"x-stream-offset": offset, "prefetch-count": "100"}
    if consumer != "-":
        headers["x-stream-consumer"] = consumer
    conn.subscribe(destination=dest, id="1", ack="client", headers=headers)
    rec.wait(lambda: len(rec.messages) >= count)
    out = []
    with rec.cond:
        frames = list(rec.messages[:count])
    for f in frames:
        out.append({"offset": f.headers.get("x-stream-offset"), "timestamp": f.headers.get("timestamp"), "body": f.body if isinstance(f.body, str) else f.body.decode()})
        if ack_offset >= 0 and f.headers.get("x-stream-offset") == str(ack_offset):
            conn.ack(f.headers["ack"], receipt="ack")
            rec.wait(lambda: "ack" in rec.receipts)
    conn.disconnect()
    print(json.dumps({"messages": out, "errors": rec.errors, "receipts": rec.receipts}))


if __name__ == "__main__":
    main()
