"""A real MCP client (the official Python SDK) driving `parley mcp` over stdio, or
`parley serve`'s `/mcp` over streamable HTTP.

Started by crates/cli/tests/mcp.rs:

    python mcp_client.py PARLEY_BINARY WORKDIR PROBLEM CONTEXT [parley mcp args...]

With PARLEY_MCP_HTTP_URL set (and PARLEY_MCP_HTTP_KEY, the API key sent as a bearer
token), it connects to that URL over streamable HTTP instead of starting `parley mcp`;
with PARLEY_MCP_HTTP_OTHER_KEY too, a second session under that key must neither see nor
reach the debate (an unknown debate, an empty list).

It lists the tools and resources, sends calls with bad arguments (each must be an MCP
error naming the argument), estimates and starts a debate with clarifications, follows it
with `debate_result` (with a progress token), answers its questions with
`answer_questions`, waits for the solution, and reads the state, report and record resources.
What it saw is printed as one JSON object on the last line of standard output; the Rust
test asserts on it. Any protocol failure raises (exit status 1).
"""

import asyncio
import contextlib
import json
import os
import sys
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


async def tool(session, name, arguments, progress=None):
    """The tool's structured reply (a dict), or raises MCPError."""
    result = dump(
        await session.call_tool(
            name, arguments, read_timeout_seconds=70, progress_callback=progress
        )
    )
    if result.get("isError"):
        raise RuntimeError(f"{name} failed: {result}")
    return result["structuredContent"]


async def refused(session, name, arguments):
    """The message of the MCP error a call with bad arguments gets."""
    try:
        result = dump(await session.call_tool(name, arguments, read_timeout_seconds=30))
    except MCPError as e:
        return {"code": e.code, "message": e.message}
    raise RuntimeError(f"{name}({arguments}) was accepted: {result}")


@contextlib.asynccontextmanager
async def connect(parley, workdir, extra, key=None):
    """The transport's two streams: over HTTP when PARLEY_MCP_HTTP_URL is set."""
    url = os.environ.get("PARLEY_MCP_HTTP_URL")
    if url:
        key = key or os.environ["PARLEY_MCP_HTTP_KEY"]
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http:
            async with streamable_http_client(url, http_client=http) as streams:
                yield streams
    else:
        params = StdioServerParameters(command=parley, args=["mcp", *extra], cwd=workdir)
        async with stdio_client(params) as streams:
            yield streams


async def other_key_sees_nothing(parley, workdir, extra, debate_id):
    """What a session under another user key gets for the debate."""
    seen = {}
    async with connect(parley, workdir, extra, os.environ["PARLEY_MCP_HTTP_OTHER_KEY"]) as streams:
        async with ClientSession(*streams) as session:
            await session.initialize()
            seen["status"] = await refused(session, "debate_status", {"debate_id": debate_id})
            seen["cancel"] = await refused(session, "cancel_debate", {"debate_id": debate_id})
            seen["listed"] = [d["id"] for d in (await tool(session, "list_debates", {}))["debates"]]
    return seen


async def main():
    parley, workdir, problem, context = sys.argv[1:5]
    extra = sys.argv[5:]
    out = {"progress": [], "errors": {}, "results": []}
    async with connect(parley, workdir, extra) as streams:
        async with ClientSession(*streams) as session:
            init = dump(await session.initialize())
            out["server"] = init.get("serverInfo", {})
            tools = dump(await session.list_tools())["tools"]
            out["tools"] = sorted(t["name"] for t in tools)
            start_schema = next(t for t in tools if t["name"] == "start_debate")["inputSchema"]
            out["start_schema_properties"] = sorted(start_schema.get("properties", {}))

            out["errors"]["missing_problem"] = await refused(session, "start_debate", {"rounds": 1})
            out["errors"]["rounds_0"] = await refused(
                session, "start_debate", {"problem": problem, "rounds": 0}
            )
            out["errors"]["rounds_1000"] = await refused(
                session, "start_debate", {"problem": problem, "rounds": 1000}
            )
            out["errors"]["bad_id"] = await refused(
                session, "debate_status", {"debate_id": "../../etc/passwd"}
            )
            out["errors"]["wait_too_long"] = await refused(
                session,
                "debate_result",
                {"debate_id": "deb-20260101-000000-abc123", "wait_seconds": 600},
            )
            out["errors"]["unknown_debate"] = await refused(
                session, "debate_status", {"debate_id": "deb-20200101-000000-zzzzzz"}
            )

            out["estimate"] = await tool(
                session, "estimate_debate", {"problem": problem, "rounds": 1}
            )

            started_at = time.monotonic()
            started = await tool(
                session,
                "start_debate",
                {"problem": problem, "rounds": 1, "clarify": True, "context": context},
            )
            out["start_seconds"] = time.monotonic() - started_at
            debate_id = started["debate_id"]
            out["debate_id"] = debate_id

            async def on_progress(progress, total, message):
                out["progress"].append({"progress": progress, "message": message})

            answered = False
            for _ in range(40):
                r = await tool(
                    session,
                    "debate_result",
                    {"debate_id": debate_id, "wait_seconds": 20},
                    progress=on_progress,
                )
                out["results"].append({k: r.get(k) for k in ("status", "message")})
                if r["status"] == "awaiting_clarifications":
                    status = await tool(session, "debate_status", {"debate_id": debate_id})
                    out["status_while_waiting"] = status
                    answers = [
                        {"id": q["id"], "answer": f"answer to {q['id']}: about 40,000 tenants"}
                        for q in status["questions_waiting"]
                    ]
                    out["answer_reply"] = await tool(
                        session,
                        "answer_questions",
                        {"debate_id": debate_id, "answers": answers},
                    )
                    answered = True
                elif r["status"] in ("completed", "failed", "cancelled"):
                    out["final"] = r
                    break
            out["answered"] = answered
            out["status_at_end"] = await tool(session, "debate_status", {"debate_id": debate_id})
            listed = await tool(session, "list_debates", {})
            out["listed"] = [d["id"] for d in listed["debates"]]

            resources = dump(await session.list_resources())["resources"]
            out["resources"] = [r["uri"] for r in resources]
            report = dump(await session.read_resource(f"parley://debates/{debate_id}/report"))
            out["report"] = report["contents"][0]["text"]
            out["report_mime"] = report["contents"][0].get("mimeType")
            state = dump(await session.read_resource(f"parley://debates/{debate_id}/state"))
            out["state"] = json.loads(state["contents"][0]["text"])
            record = dump(await session.read_resource(f"parley://debates/{debate_id}/record"))
            out["record"] = json.loads(record["contents"][0]["text"])
            try:
                await session.read_resource("parley://debates/nope/state")
                out["errors"]["bad_resource"] = None
            except MCPError as e:
                out["errors"]["bad_resource"] = {"code": e.code, "message": e.message}
    if os.environ.get("PARLEY_MCP_HTTP_OTHER_KEY"):
        out["other_key"] = await other_key_sees_nothing(parley, workdir, extra, out["debate_id"])
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
