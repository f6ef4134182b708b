#!/usr/bin/python3
"""stomp.py (Debian python3-stomp) taking a Herald advisory lock.

Usage: stomppy_lock.py locked-txn HOST:PORT LOCK N

N times: SUBSCRIBE /lock/LOCK and wait for the grant (lock-token), then in
one transaction set /kv/cfg.site1.gen and /kv/cfg.site2.gen to the same
value, each SEND fenced with if-fence:LOCK:TOKEN, COMMIT with a receipt,
and UNSUBSCRIBE (giving the lock back). Prints one JSON object: the tokens
it was given and the revisions of its commits. The Go test judges them.
"""

import json
import os
import sys
import threading

import stomp

TIMEOUT = 20.0


def die(msg):
    sys.stderr.write("stomppy_lock: " + msg + "\n")
    sys.exit(2)


class Listener(stomp.ConnectionListener):
    def __init__(self):
        self.cond = threading.Condition()
        self.grants = []
        self.receipts = {}
        self.errors = []

    def on_message(self, frame):
        with self.cond:
            if "lock-token" in frame.headers:
                self.grants.append(int(frame.headers["lock-token"]))
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


def locked_txn(addr, lock, n):
    host, port = addr.rsplit(":", 1)
    conn = stomp.Connection12([(host, int(port))], heartbeats=(0, 0))
    lst = Listener()
    conn.set_listener("l", lst)
    conn.connect(wait=True)
    tokens, revisions = [], []
    for i in range(n):
        conn.subscribe(destination="/lock/" + lock, id="lock%d" % i, ack="auto")
        lst.wait(lambda: len(lst.grants) > i, "grant %d" % i)
        token = lst.grants[i]
        tokens.append(token)
        tx = conn.begin()
        value = "%d-%d" % (os.getpid(), i)
        for key in ("/kv/cfg.site1.gen", "/kv/cfg.site2.gen"):
            conn.send(destination=key, body=value, transaction=tx,
                      headers={"if-fence": "%s:%d" % (lock, token)})
        rid = "c%d" % i
        conn.commit(transaction=tx, headers={"receipt": rid})
        lst.wait(lambda: rid in lst.receipts, "commit receipt %d" % i)
        revisions.append(int(lst.receipts[rid]["revision"]))
        uid = "u%d" % i
        conn.unsubscribe(id="lock%d" % i, headers={"receipt": uid})
        lst.wait(lambda: uid in lst.receipts, "unsubscribe receipt %d" % i)
    conn.disconnect()
    print(json.dumps({"tokens": tokens, "revisions": revisions}))


def main():
    if len(sys.argv) != 5 or sys.argv[1] != "locked-txn":
        die("usage: stomppy_lock.py locked-txn HOST:PORT LOCK N")
    locked_txn(sys.argv[2], sys.argv[3], int(sys.argv[4]))


if __name__ == "__main__":
    main()
