#!/usr/bin/env python3
"""A scripted ACP agent that reports token usage (system python3, no dependencies).

Sessions carry a `model` config option (category `model`: `alpha` or `beta`), switched by
`session/set_config_option` (answered with the options) or by the agent itself. Each
`session/prompt` text is a JSON script of what the turn does, in this order:
  {"switch": "beta"}          a `config_option_update` naming the new model
  {"tool": true}              one `tool_call`
  {"costs": [0.01, 0.03]}     one `usage_update` per cumulative session cost (USD)
  {"usage": {...}}            the prompt answer's `usage`, as given
It always streams one `agent_message_chunk`. It exits when stdin closes.
"""

import json
import os
import sys

MODELS = [{"value": "alpha", "name": "Alpha"}, {"value": "beta", "name": "Beta"}]
sessions = {}


def send(msg):
    msg["jsonrpc"] = "2.0"
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def options(sid):
    return [{"id": "model", "name": "Model", "category": "model", "type": "select",
             "currentValue": sessions[sid], "options": MODELS}]


def update(sid, upd):
    send({"method": "session/update", "params": {"sessionId": sid, "update": upd}})


def prompt(sid, params):
    text = "".join(b.get("text", "") for b in params.get("prompt", []) if b.get("type") == "text")
    try:
        script = json.loads(text)
    except ValueError:
        script = {}
    if script.get("switch"):
        sessions[sid] = script["switch"]
        update(sid, {"sessionUpdate": "config_option_update", "configOptions": options(sid)})
    if script.get("tool"):
        update(sid, {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "Read a file",
                     "kind": "read", "status": "completed"})
    update(sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "ok"}})
    for cost in script.get("costs", []):
        update(sid, {"sessionUpdate": "usage_update", "used": 1000, "size": 200000,
                     "cost": {"amount": cost, "currency": "USD"}})
    result = {"stopReason": "end_turn"}
    if "usage" in script:
        result["usage"] = script["usage"]
    return result


def main():
    n = 0
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if "id" not in msg or "method" not in msg:
            continue
        method, params = msg["method"], msg.get("params") or {}
        result = None
        if method == "initialize":
            result = {"protocolVersion": 1, "agentCapabilities": {}, "authMethods": []}
        elif method == "session/new":
            n += 1
            sid = f"usage_{os.getpid()}_{n}"
            sessions[sid] = "alpha"
            result = {"sessionId": sid, "configOptions": options(sid)}
        elif method == "session/set_config_option" and params.get("sessionId") in sessions:
            sessions[params["sessionId"]] = params.get("value")
            result = {"configOptions": options(params["sessionId"])}
        elif method == "session/prompt" and params.get("sessionId") in sessions:
            result = prompt(params["sessionId"], params)
        if result is None:
            send({"id": msg["id"], "error": {"code": -32601, "message": f"method not found: {method}"}})
        else:
            send({"id": msg["id"], "result": result})


if __name__ == "__main__":
    main()
