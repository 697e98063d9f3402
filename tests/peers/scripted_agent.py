#!/usr/bin/env python3
"""A scripted ACP agent for tests (system python3, no dependencies).

It answers `initialize` with the protocolVersion given by --version (a version the bridge may
not speak), appends the params of every `initialize` it receives to --record FILE (one JSON
object a line, so a test sees what the bridge told the agent), answers `session/new` with a
fixed id, and everything else with -32601. It exits when stdin closes.

With --log FILE it is a fuller agent for the settings tests: every request and notification
is appended to FILE as {"pid", "method", "params"}; --mcp http,sse advertises those MCP
transports; --models a,b reports them as the session's model state (and --config-models as a
`model` config option instead); session/new gives ids scripted_1, scripted_2, ...;
session/load, session/resume, session/set_model and session/set_config_option succeed;
a prompt whose text contains "wait" is held until its session/cancel (stopReason cancelled),
any other prompt ends at once (end_turn).
"""

import argparse
import json
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", type=int, default=1)
    ap.add_argument("--record")
    ap.add_argument("--log")
    ap.add_argument("--mcp", default="")
    ap.add_argument("--models", default="")
    ap.add_argument("--config-models", default="")
    args = ap.parse_args()
    if args.log:
        return full_agent(args)
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


def send(msg) -> None:
    msg["jsonrpc"] = "2.0"
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def full_agent(args) -> None:
    import os

    transports = [t for t in args.mcp.split(",") if t]
    models = [m for m in args.models.split(",") if m]
    config_models = [m for m in args.config_models.split(",") if m]
    held = {}
    sessions = 0
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method, params = msg.get("method"), msg.get("params") or {}
        if method is None:
            continue
        with open(args.log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"pid": os.getpid(), "method": method, "params": params}) + "\n")
        if "id" not in msg:
            if method == "session/cancel" and params.get("sessionId") in held:
                send({"id": held.pop(params["sessionId"]), "result": {"stopReason": "cancelled"}})
            continue
        rid = msg["id"]
        if method == "initialize":
            caps = {"loadSession": True, "mcpCapabilities": {t: True for t in transports}}
            info = {"name": "scripted", "title": "Scripted agent", "version": "1"}
            send({"id": rid, "result": {"protocolVersion": 1, "agentCapabilities": caps, "authMethods": [], "agentInfo": info}})
        elif method == "session/new":
            sessions += 1
            result = {"sessionId": f"scripted_{sessions}"}
            if models:
                avail = [{"modelId": m, "name": m.upper()} for m in models]
                result["models"] = {"availableModels": avail, "currentModelId": models[0]}
            if config_models:
                opts = [{"value": m, "name": m.upper()} for m in config_models]
                result["configOptions"] = [{"id": "model", "name": "Model", "category": "model", "type": "select", "currentValue": config_models[0], "options": opts}]
            send({"id": rid, "result": result})
        elif method in ("session/load", "session/resume", "session/set_model", "session/set_config_option"):
            send({"id": rid, "result": {}})
        elif method == "session/prompt":
            text = " ".join(b.get("text", "") for b in params.get("prompt", []))
            if "wait" in text:
                held[params.get("sessionId")] = rid
            else:
                send({"id": rid, "result": {"stopReason": "end_turn"}})
        else:
            send({"id": rid, "error": {"code": -32601, "message": f"method not found: {method}"}})


if __name__ == "__main__":
    main()
