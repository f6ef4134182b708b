#!/usr/bin/python3
"""stomp.py (Debian python3-stomp) logging in to Herald, over TCP or TLS.

Usage: stomppy_auth.py HOST:PORT LOGIN PASSCODE CA CERT KEY ACTION DEST

LOGIN, PASSCODE, CA, CERT and KEY may be "-" (none; CA "-" means plain
TCP). ACTION is "send" or "subscribe" (with a receipt) or "none". Prints one
JSON object: connected (the CONNECTED headers or null), errors (the ERROR
frames' headers and bodies) and receipts. The Go test judges it.
"""

import json
import sys
import threading
import time

import stomp


class Recorder(stomp.ConnectionListener):
    def __init__(self):
        self.cond = threading.Condition()
        self.connected = None
        self.errors = []
        self.receipts = []
        self.disconnected = False

    def on_connected(self, frame):
        with self.cond:
            self.connected = dict(frame.headers)
            self.cond.notify_all()

    def on_error(self, frame):
        with self.cond:
            self.errors.append({"headers": dict(frame.headers), "body": str(frame.body)})
            self.cond.notify_all()

    def on_receipt(self, frame):
        with self.cond:
            self.receipts.append(frame.headers.get("receipt-id"))
            self.cond.notify_all()

    def on_disconnected(self):
        with self.cond:
            self.disconnected = True
            self.cond.notify_all()

    def wait(self, pred, timeout=10.0):
        with self.cond:
            self.cond.wait_for(lambda: pred() or self.errors or self.disconnected, timeout)


def opt(v):
    return None if v == "-" else v


def main():
    addr, login, passcode, ca, cert, key, action, dest = sys.argv[1:9]
    host, port = addr.rsplit(":", 1)
    hp = (host, int(port))
    conn = stomp.Connection12([hp], heartbeats=(0, 0))
    if opt(ca):
        conn.set_ssl(for_hosts=[hp], ca_certs=ca, cert_file=opt(cert), key_file=opt(key))
    rec = Recorder()
    conn.set_listener("rec", rec)
    try:
        conn.connect(username=opt(login), passcode=opt(passcode), wait=False)
    except Exception as e:  # a failed TLS handshake lands here
        print(json.dumps({"connected": None, "errors": [], "receipts": [], "exception": repr(e)}))
        return
    rec.wait(lambda: rec.connected is not None)
    if rec.connected is not None and action != "none":
        if action == "send":
            conn.send(dest, "from stomp.py", headers={"receipt": "r1"})
        else:
            conn.subscribe(dest, id="s1", headers={"receipt": "r1"})
        rec.wait(lambda: "r1" in rec.receipts)
    # Let a late ERROR arrive.
    time.sleep(0.1)
    with rec.cond:
        out = {"connected": rec.connected, "errors": rec.errors, "receipts": rec.receipts}
    print(json.dumps(out))
    try:
        conn.disconnect()
    except Exception:
        pass


main()
