#!/usr/bin/env python3
"""Drives a zcode-acp bridge with the official ACP Python SDK (agent-client-protocol 0.12.1,
installed in tests/peers/venv by scripts/install-test-deps), as an SDK user would write it.

  sdk_client.py stdio --cwd DIR -- BRIDGE-COMMAND...
      spawns the bridge (the SDK is its editor on stdio), runs six turns and an `elicit`
      turn, then reads the history back: a tail `session/load` and `_session/load_earlier`
      pages until the beginning.
  sdk_client.py ws --url WS-URL --session ID --cwd DIR
      connects through the hub with the SDK's own WebSocket transport (the `http` extra),
      reads an existing session's history back the same way, then runs an `elicit` turn.
  sdk_client.py resume --cwd DIR -- BRIDGE-COMMAND...
      makes a session in one spawned bridge, then `resume_session(session_id, cwd)` (no
      `mcpServers`) in a second one and prompts it there.

The client advertises elicitation forms (the SDK routes `elicitation/create` only with its
`use_unstable_protocol` flag) and answers every form with {"name": "Py"}. It prints
one JSON report on stdout; the Rust test (tests/tests/python_sdk.rs) judges it.
"""

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from acp import PROTOCOL_VERSION, connect_to_agent, text_block
from acp.schema import (
    AcceptElicitationResponse,
    AgentMessageChunk,
    AllowedOutcome,
    ClientCapabilities,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    Implementation,
    RequestPermissionResponse,
    UserMessageChunk,
)
from acp.stdio import spawn_agent_process

PAGE = 2


class Recorder:
    """An SDK `Client`: records user and agent text; answers forms and permissions."""

    def __init__(self) -> None:
        self.user: list[str] = []
        self.agent: list[str] = []
        self.elicitations: list[str] = []

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if isinstance(update, UserMessageChunk) and getattr(update.content, "text", None):
            self.user.append(update.content.text)
        elif isinstance(update, AgentMessageChunk) and getattr(update.content, "text", None):
            self.agent.append(update.content.text)

    async def request_permission(self, options: Any, session_id: str, tool_call: Any, **kwargs: Any) -> Any:
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=options[0].option_id))

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        self.elicitations.append(message)
        return AcceptElicitationResponse(action="accept", content={"name": "Py"})

    async def ext_notification(self, method: str, params: dict[str, Any]) -> None:
        pass


async def settle(conn: Any) -> None:
    """Lets the SDK finish dispatching the notifications that preceded an answer (it runs
    each in its own task): one more round trip through the bridge and the agent."""
    await conn.ext_method("demo/echo", {})
    for _ in range(20):
        await asyncio.sleep(0)


async def initialize(conn: Any) -> Any:
    caps = ClientCapabilities(elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities()))
    return await conn.initialize(
        protocol_version=PROTOCOL_VERSION,
        client_capabilities=caps,
        client_info=Implementation(name="python-sdk-test", version="0.12.1"),
    )


async def elicit(conn: Any, rec: Recorder, sid: str) -> dict[str, Any]:
    rec.agent.clear()
    resp = await conn.prompt(session_id=sid, prompt=[text_block("elicit")])
    return {"stopReason": resp.stop_reason, "asked": list(rec.elicitations), "said": "".join(rec.agent)}


async def read_back(conn: Any, rec: Recorder, sid: str, cwd: str) -> dict[str, Any]:
    """A tail `session/load` (`_meta.zcode.limit`), then `_session/load_earlier` pages."""
    rec.user.clear()
    loaded = await conn.load_session(cwd=cwd, session_id=sid, zcode={"limit": PAGE})
    await settle(conn)
    tail = list(rec.user)
    meta = (loaded.field_meta or {}).get("zcode", {}).get("replayMeta")
    report: dict[str, Any] = {
        "loadMeta": loaded.field_meta,
        "loadFields": sorted(loaded.model_dump(by_alias=True, exclude_none=True)),
        "tail": tail,
        "pages": [],
    }
    history = tail
    while meta and meta.get("hasMore"):
        rec.user.clear()
        page = await conn.ext_method("session/load_earlier", {"sessionId": sid, "before": meta["cursor"], "limit": PAGE})
        await settle(conn)
        report["pages"].append({"texts": list(rec.user), "result": page})
        history = list(rec.user) + history
        meta = page.get("replayMeta")
        if len(report["pages"]) > 50:
            break
    report["history"] = history
    return report


async def run_stdio(args: argparse.Namespace) -> dict[str, Any]:
    rec = Recorder()
    command = args.command
    # The SDK passes its child a trimmed environment (PATH, HOME, ...) unless given one: the
    # bridge would leave the test's home and ports for the user's own (and start a hub there).
    async with spawn_agent_process(
        rec, command[0], *command[1:], env=dict(os.environ), cwd=args.cwd, use_unstable_protocol=True
    ) as (conn, _process):
        init = await initialize(conn)
        sid = (await conn.new_session(cwd=args.cwd)).session_id
        for i in range(1, 7):
            await conn.prompt(session_id=sid, prompt=[text_block(f"turn {i}")])
        out = {"protocolVersion": init.protocol_version, "sessionId": sid, "elicit": await elicit(conn, rec, sid)}
        out.update(await read_back(conn, rec, sid, args.cwd))
        return out


async def run_resume(args: argparse.Namespace) -> dict[str, Any]:
    """A session made by one bridge, resumed in a second one with `resume_session(session_id,
    cwd)` (no `mcpServers`: optional for a resume), then prompted there."""
    rec = Recorder()
    command = args.command
    async with spawn_agent_process(rec, command[0], *command[1:], env=dict(os.environ), cwd=args.cwd) as (conn, _):
        await initialize(conn)
        sid = (await conn.new_session(cwd=args.cwd)).session_id
        await conn.prompt(session_id=sid, prompt=[text_block("before the resume")])
    async with spawn_agent_process(rec, command[0], *command[1:], env=dict(os.environ), cwd=args.cwd) as (conn, _):
        await initialize(conn)
        resumed = await conn.resume_session(session_id=sid, cwd=args.cwd)
        rec.agent.clear()
        resp = await conn.prompt(session_id=sid, prompt=[text_block("after the resume")])
        return {
            "sessionId": sid,
            "resumed": resumed.model_dump(by_alias=True, exclude_none=True),
            "stopReason": resp.stop_reason,
            "said": "".join(rec.agent),
        }


async def run_ws(args: argparse.Namespace) -> dict[str, Any]:
    from acp.ws import create_websocket_stream

    rec = Recorder()
    transport = await create_websocket_stream(args.url)
    conn = connect_to_agent(rec, transport, use_unstable_protocol=True)
    try:
        init = await initialize(conn)
        out = {"protocolVersion": init.protocol_version}
        out.update(await read_back(conn, rec, args.session, args.cwd))
        out["elicit"] = await elicit(conn, rec, args.session)
        return out
    finally:
        await conn.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["stdio", "ws", "resume"])
    ap.add_argument("--cwd", required=True)
    ap.add_argument("--url")
    ap.add_argument("--session")
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:split])
    args.command = argv[split + 1 :]
    run = {"stdio": run_stdio, "ws": run_ws, "resume": run_resume}[args.mode]
    report = asyncio.run(asyncio.wait_for(run(args), timeout=60))
    sys.stdout.write(json.dumps(report, default=str) + "\n")


if __name__ == "__main__":
    main()
