#!/usr/bin/env python3
"""A scripted ACP agent for tests (system python3, no dependencies).

It answers `initialize` with the protocolVersion given by --version (a version the bridge may
not speak), appends the params of every `initialize` it receives to --record FILE (one JSON
object a line, so a test sees what the bridge told the agent), answers `session/new` with a
fixed id, and everything else with -32601. It exits when stdin closes.
"""

import argparse
import json
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", type=int, default=1)
    ap.add_argument("--record")
    args = ap.parse_args()
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if "id" not in msg or "method" not in msg:
            continue
        method, params = msg["method"], msg.get("params")
        if method == "initialize":
            if args.record:
                with open(args.record, "a", encoding="utf-8") as f:
                    f.write(json.dumps(params) + "\n")
            result = {"protocolVersion": args.version, "agentCapabilities": {}, "authMethods": []}
            reply = {"jsonrpc": "2.0", "id": msg["id"], "result": result}
        elif method == "session/new":
            reply = {"jsonrpc": "2.0", "id": msg["id"], "result": {"sessionId": "scripted_1"}}
        else:
            err = {"code": -32601, "message": f"method not found: {method}"}
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": err}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
