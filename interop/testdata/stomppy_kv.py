#!/usr/bin/python3
"""stomp.py (Debian python3-stomp) as a key-value client of Herald.

Usage: stomppy_kv.py cas-increment HOST:PORT DEST N START

Waits (watching it) until key START exists, so that several clients start
together; then watches DEST (/kv/BUCKET.KEY) and increments the integer it holds N times
with compare-and-set (if-revision: the revision last seen; the first
attempt uses the snapshot's, seen before the gate opened), retrying on a
kv-conflict RECEIPT once the watch has shown a newer revision. Prints one
JSON object: the revisions its successful writes got, the conflicts, and
whether the watch's snapshot marker came. The Go test judges it.
"""

import json
import sys
import threading

import stomp

TIMEOUT = 10.0


def die(msg):
    sys.stderr.write("stomppy_kv: " + msg + "\n")
    sys.exit(2)


class Listener(stomp.ConnectionListener):
    def __init__(self):
        self.cond = threading.Condition()
        self.value = None
        self.rev = 0
        self.marker = None
        self.receipts = {}
        self.errors = []

    def on_message(self, frame):
        if frame.headers.get("subscription") != "watch":
            return
        with self.cond:
            h = frame.headers
            if "kv-snapshot-complete" in h:
                self.marker = int(h["kv-snapshot-complete"])
            else:
                rev = int(h["revision"])
                if rev <= self.rev:
                    self.errors.append("revision %d after %d" % (rev, self.rev))
                self.rev = rev
                body = frame.body if isinstance(frame.body, str) else frame.body.decode()
                self.value = None if h.get("kv-operation") == "DEL" else body
            self.cond.notify_all()

    def on_receipt(self, frame):
        with self.cond:
            self.receipts[frame.headers.get("receipt-id")] = dict(frame.headers)
            self.cond.notify_all()

    def on_error(self, frame):
        with self.cond:
            self.errors.append("ERROR %r %r" % (dict(frame.headers), frame.body))
            self.cond.notify_all()

    def wait(self, pred, what):
        with self.cond:
            if not self.cond.wait_for(lambda: pred() or self.errors, TIMEOUT):
                die("timed out waiting for " + what)
            if self.errors:
                die("while waiting for %s: %r" % (what, self.errors))


class Gate(stomp.ConnectionListener):
    def __init__(self):
        self.open = threading.Event()

    def on_message(self, frame):
        if frame.headers.get("subscription") == "gate" and "revision" in frame.headers:
            self.open.set()


def cas_increment(addr, dest, n, start_key):
    host, port = addr.rsplit(":", 1)
    conn = stomp.Connection12([(host, int(port))])
    lis, gate = Listener(), Gate()
    conn.set_listener("kv", lis)
    conn.set_listener("gate", gate)
    conn.connect(wait=True)
    conn.subscribe(dest, id="watch", ack="auto")
    lis.wait(lambda: lis.marker is not None, "the snapshot marker")
    # The first attempt uses what the snapshot showed before the gate
    # opened, as every client does: all of them race for the same revision
    # and all but one must be told of the conflict, however the scheduler
    # runs them.
    with lis.cond:
        stale = (int(lis.value), lis.rev)
    conn.subscribe(start_key, id="gate", ack="auto")
    if not gate.open.wait(TIMEOUT):
        die("timed out waiting for " + start_key)
    revisions, conflicts, seq = [], 0, 0
    while len(revisions) < n:
        with lis.cond:
            value, rev = int(lis.value), lis.rev
        if seq == 0:
            value, rev = stale
        seq += 1
        rid = "r%d" % seq
        conn.send(dest, str(value + 1), headers={"receipt": rid, "if-revision": str(rev)})
        lis.wait(lambda: rid in lis.receipts, "RECEIPT " + rid)
        r = lis.receipts[rid]
        if "kv-conflict" in r:
            conflicts += 1
            cur = int(r["kv-conflict"])
            lis.wait(lambda: lis.rev >= cur, "revision %d on the watch" % cur)
            continue
        revisions.append(int(r["revision"]))
    conn.disconnect(receipt="bye")
    return {"revisions": revisions, "conflicts": conflicts, "marker": lis.marker}


def main():
    if len(sys.argv) != 6 or sys.argv[1] != "cas-increment":
        die(__doc__)
    print(json.dumps(cas_increment(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])))


if __name__ == "__main__":
    main()
