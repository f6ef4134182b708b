#!/usr/bin/python3
"""stomp.py (Debian python3-stomp) scenarios against a Herald broker.

Usage: stomppy_client.py MODE HOST:PORT [ARGS...]

Each mode prints one JSON object on stdout and exits 0, or prints a message
on stderr and exits non-zero. The Go tests in ../interop_test.go judge the
JSON; this script only fails on client-side trouble (timeouts, errors).
"""

import json
import os
import sys
import threading
import time

import stomp

if os.environ.get("STOMPPY_DEBUG"):
    import logging
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)

TIMEOUT = 10.0
# A header value needing every STOMP 1.1/1.2 escape (\\ \c \n, and \r in 1.2).
SPECIAL = "colon:back\\slash\nnew line\rcr"


def die(msg):
    sys.stderr.write("stomppy_client: " + msg + "\n")
    sys.exit(2)


class Recorder(stomp.ConnectionListener):
    """Records every frame the connection receives."""

    def __init__(self):
        self.cond = threading.Condition()
        self.connected = None
        self.messages = []
        self.receipts = []
        self.errors = []
        self.heartbeats = 0
        self.hb_timeouts = 0
        self.disconnected = False

    def on_connected(self, frame):
        with self.cond:
            self.connected = dict(frame.headers)
            self.cond.notify_all()

    def on_message(self, frame):
        with self.cond:
            self.messages.append((dict(frame.headers), frame.body))
            self.cond.notify_all()

    def on_receipt(self, frame):
        with self.cond:
            self.receipts.append(frame.headers.get("receipt-id"))
            self.cond.notify_all()

    def on_error(self, frame):
        with self.cond:
            self.errors.append({"headers": dict(frame.headers), "body": str(frame.body)})
            self.cond.notify_all()

    def on_heartbeat(self):
        with self.cond:
            self.heartbeats += 1

    def on_heartbeat_timeout(self):
        with self.cond:
            self.hb_timeouts += 1

    def on_disconnected(self):
        with self.cond:
            self.disconnected = True
            self.cond.notify_all()

    def wait(self, pred, what, timeout=TIMEOUT):
        with self.cond:
            if not self.cond.wait_for(lambda: pred() or self.errors, timeout):
                die("timed out after %.0fs waiting for %s (messages=%d receipts=%r)"
                    % (timeout, what, len(self.messages), self.receipts))
            if self.errors:
                die("ERROR frame while waiting for %s: %r" % (what, self.errors))

    def wait_receipt(self, rid):
        self.wait(lambda: rid in self.receipts, "RECEIPT " + rid)

    def wait_messages(self, n):
        self.wait(lambda: len(self.messages) >= n, "%d MESSAGE frames" % n)


def connect(addr, version="1.2", **kw):
    host, port = addr.rsplit(":", 1)
    cls = {"1.1": stomp.Connection11, "1.2": stomp.Connection12}[version]
    conn = cls([(host, int(port))], **kw)
    rec = Recorder()
    conn.set_listener("rec", rec)
    conn.connect(wait=True, headers={"client-id": "stomppy-interop"})
    # wait=True may return before our listener has seen the frame.
    rec.wait(lambda: rec.connected is not None, "CONNECTED")
    return conn, rec


def bye(conn, rec):
    conn.disconnect(receipt="bye")
    # disconnect(receipt=...) waits for the receipt and stops the transport.


def body_of(m):
    return m[1] if isinstance(m[1], str) else m[1].decode("utf-8", "replace")


def mode_connect(addr):
    conn, rec = connect(addr)
    out = {"connected": rec.connected}
    bye(conn, rec)
    return out


def mode_send_receipts(addr, dest, n):
    """Send n messages, each asking for a receipt; wait for every receipt."""
    conn, rec = connect(addr)
    ids = []
    for i in range(int(n)):
        rid = "r-%d" % i
        ids.append(rid)
        conn.send(dest, "py-%d" % i, headers={"receipt": rid, "x-interop": "stomp.py", "x-special": SPECIAL})
    for rid in ids:
        rec.wait_receipt(rid)
    out = {"sent": ids, "receipts": list(rec.receipts)}
    bye(conn, rec)
    return out


def mode_ack_nack(addr, dest, version="1.2"):
    """Consume 5 messages client-individual: ACK 0,1,3,4, NACK 2, then wait
    for 2 to come back and ACK it. At 1.2 ACK/NACK carry id (the MESSAGE's
    ack header); at 1.1 message-id and subscription."""
    conn, rec = connect(addr, version)

    def ack(h, receipt):
        if version == "1.2":
            conn.ack(h["ack"], receipt=receipt)
        else:
            conn.ack(h["message-id"], h["subscription"], receipt=receipt)

    def nack(h, receipt):
        if version == "1.2":
            conn.nack(h["ack"], receipt=receipt)
        else:
            conn.nack(h["message-id"], h["subscription"], receipt=receipt)

    for i in range(5):
        conn.send(dest, "m%d" % i, headers={"receipt": "s%d" % i})
    for i in range(5):
        rec.wait_receipt("s%d" % i)
    conn.subscribe(dest, id="sub-1", ack="client-individual", headers={"receipt": "sub"})
    rec.wait_receipt("sub")
    rec.wait_messages(5)
    first = list(rec.messages[:5])
    for i, (h, _) in enumerate(first):
        if i == 2:
            nack(h, "n%d" % i)
        else:
            ack(h, "a%d" % i)
    for i in range(5):
        rec.wait_receipt(("n%d" if i == 2 else "a%d") % i)
    rec.wait_messages(6)
    h, _ = rec.messages[5]
    ack(h, "a-again")
    rec.wait_receipt("a-again")
    time.sleep(0.5)  # anything else arriving now would be a duplicate
    out = {
        "first": [{"body": body_of(m), "headers": m[0]} for m in first],
        "again": [{"body": body_of(m), "headers": m[0]} for m in rec.messages[5:]],
    }
    bye(conn, rec)
    return out


def mode_send_disconnect(addr, dest, n):
    """Send n messages without receipts, then DISCONNECT with a receipt: the
    RECEIPT must come only once all n are durable."""
    conn, rec = connect(addr)
    for i in range(int(n)):
        conn.send(dest, "d-%d" % i)
    conn.disconnect(receipt="bye")
    return {"receipts": list(rec.receipts)}


def mode_tx_ack(addr, dest):
    """ACK inside a transaction: ABORT leaves the message unacknowledged (it
    comes back after the consumer goes away); COMMIT acknowledges it."""
    conn, rec = connect(addr)
    conn.send(dest, "txack-1", headers={"receipt": "s1"})
    conn.send(dest, "txack-2", headers={"receipt": "s2"})
    rec.wait_receipt("s2")
    conn.subscribe(dest, id="sub-a", ack="client-individual", headers={"receipt": "sub", "prefetch-count": "1"})
    rec.wait_receipt("sub")
    rec.wait_messages(1)
    h1, _ = rec.messages[0]
    conn.begin("tx-a")
    conn.ack(h1["ack"], transaction="tx-a")
    conn.abort("tx-a", receipt="abort")
    rec.wait_receipt("abort")
    time.sleep(0.3)  # proves absence: nothing new arrives in 0.3 s
    # prefetch 1: an aborted ACK returns no credit, so nothing new arrives.
    after_abort = [body_of(m) for m in rec.messages]
    conn.disconnect(receipt="bye1")

    conn, rec = connect(addr)
    conn.subscribe(dest, id="sub-b", ack="client-individual", headers={"receipt": "sub", "prefetch-count": "1"})
    rec.wait_receipt("sub")
    rec.wait_messages(1)
    h, _ = rec.messages[0]
    second = {"body": body_of(rec.messages[0]), "headers": h}
    conn.begin("tx-c")
    conn.ack(h["ack"], transaction="tx-c")
    conn.commit("tx-c", receipt="commit")
    rec.wait_receipt("commit")
    rec.wait_messages(2)
    h2, _ = rec.messages[1]
    conn.ack(h2["ack"], receipt="a2")
    rec.wait_receipt("a2")
    time.sleep(0.3)  # proves absence: no third MESSAGE (a redelivery) in 0.3 s
    out = {
        "after_abort": after_abort,
        "second_connection": [{"body": body_of(m), "headers": m[0]} for m in rec.messages],
        "first_after_reconnect": second,
    }
    bye(conn, rec)
    return out


def mode_transaction(addr, dest):
    conn, rec = connect(addr)
    conn.subscribe(dest, id="sub-tx", ack="auto", headers={"receipt": "sub"})
    rec.wait_receipt("sub")

    conn.begin("tx-commit")
    conn.send(dest, "tx1-a", transaction="tx-commit")
    conn.send(dest, "tx1-b", transaction="tx-commit")
    time.sleep(0.5)  # proves absence: no MESSAGE before COMMIT in 0.5 s
    before_commit = [body_of(m) for m in rec.messages]
    conn.commit("tx-commit", receipt="commit")
    rec.wait_receipt("commit")
    rec.wait_messages(2)
    after_commit = [body_of(m) for m in rec.messages]

    conn.begin("tx-abort")
    conn.send(dest, "tx2-aborted", transaction="tx-abort")
    conn.abort("tx-abort", receipt="abort")
    rec.wait_receipt("abort")
    conn.send(dest, "marker", headers={"receipt": "marker"})
    rec.wait_receipt("marker")
    rec.wait(lambda: any(body_of(m) == "marker" for m in rec.messages), "marker MESSAGE")
    time.sleep(0.3)  # proves absence: the aborted SEND does not arrive in 0.3 s
    out = {
        "before_commit": before_commit,
        "after_commit": after_commit,
        "all": [body_of(m) for m in rec.messages],
    }
    bye(conn, rec)
    return out


def mode_binary(addr, dest, infile, outfile):
    with open(infile, "rb") as f:
        body = f.read()
    conn, rec = connect(addr, auto_decode=False)
    conn.subscribe(dest, id="sub-bin", ack="client-individual", headers={"receipt": "sub"})
    rec.wait_receipt("sub")
    conn.send(dest, body, headers={"receipt": "bin", "content-type": "application/octet-stream"})
    rec.wait_receipt("bin")
    rec.wait_messages(1)
    h, got = rec.messages[0]
    conn.ack(h["ack"], receipt="ack")
    rec.wait_receipt("ack")
    if isinstance(got, str):
        die("body was decoded to str despite auto_decode=False")
    with open(outfile, "wb") as f:
        f.write(got)
    out = {"sent_len": len(body), "recv_len": len(got), "headers": h}
    bye(conn, rec)
    return out


def mode_heartbeat(addr, dest, hold_s):
    conn, rec = connect(addr, heartbeats=(1000, 1000))
    time.sleep(float(hold_s))  # not synchronisation: the idle period heart-beats must cover
    beats, timeouts, disc = rec.heartbeats, rec.hb_timeouts, rec.disconnected
    alive = conn.is_connected()
    # Prove the connection still carries frames after the idle period.
    conn.subscribe(dest, id="sub-hb", ack="auto", headers={"receipt": "sub"})
    rec.wait_receipt("sub")
    conn.send(dest, "still-alive", headers={"receipt": "send"})
    rec.wait_receipt("send")
    rec.wait_messages(1)
    out = {
        "connected": rec.connected,
        "heartbeats_received": beats,
        "heartbeat_timeouts": timeouts,
        "disconnected_during_hold": disc,
        "is_connected_after_hold": alive,
        "body_after_hold": body_of(rec.messages[0]),
    }
    bye(conn, rec)
    return out


MODES = {
    "connect": mode_connect,
    "send-receipts": mode_send_receipts,
    "ack-nack": mode_ack_nack,
    "transaction": mode_transaction,
    "send-disconnect": mode_send_disconnect,
    "tx-ack": mode_tx_ack,
    "binary": mode_binary,
    "heartbeat": mode_heartbeat,
}


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in MODES:
        die("usage: stomppy_client.py {%s} HOST:PORT [ARGS...]" % "|".join(MODES))
    try:
        out = MODES[sys.argv[1]](*sys.argv[2:])
    except SystemExit:
        raise
    except Exception as e:  # report, never hang
        die("%s: %s" % (type(e).__name__, e))
    out["stomp_py_version"] = ".".join(str(x) for x in stomp.__version__)
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
