#!/usr/bin/env python3
"""An ACP agent that records what it receives (system python3, no dependencies).

Every request and notification is appended to --record FILE as {"method", "params"} (one JSON
object a line) before it is answered. It offers `session/load` only (loadSession, no resume)
and checks `session/load` params the way codex-acp, claude-agent-acp and gemini-cli do:
`sessionId`, `cwd` and `mcpServers` (an array) are required, else -32602 "missing field ...".
`session/new` gives ids recorded_1, recorded_2, ...; a load of any id succeeds; a prompt ends
at once (end_turn); anything else is -32601. It exits when stdin closes.
"""

import argparse
import json
import sys


def send(msg) -> None:
    msg["jsonrpc"] = "2.0"
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def missing(params, fields):
    for name in fields:
        if name not in params:
            return f"missing field `{name}`"
    if "mcpServers" in fields and not isinstance(params["mcpServers"], list):
        return "invalid type: `mcpServers` must be a sequence"
    return None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--record", required=True)
    args = ap.parse_args()
    made = 0
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, params = msg.get("method"), msg.get("params") or {}
        if method is None:
            continue
        with open(args.record, "a", encoding="utf-8") as f:
            f.write(json.dumps({"method": method, "params": params}) + "\n")
        if "id" not in msg:
            continue
        result, error = None, None
        if method == "initialize":
            result = {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}, "authMethods": []}
        elif method == "session/new":
            made += 1
            result = {"sessionId": f"recorded_{made}"}
        elif method == "session/load":
            why = missing(params, ["sessionId", "cwd", "mcpServers"])
            if why:
                error = {"code": -32602, "message": f"Invalid params: {why}"}
            else:
                result = {}
        elif method == "session/prompt":
            result = {"stopReason": "end_turn"}
        else:
            error = {"code": -32601, "message": f"method not found: {method}"}
        if error:
            send({"id": msg["id"], "error": error})
        else:
            send({"id": msg["id"], "result": result})


if __name__ == "__main__":
    main()
