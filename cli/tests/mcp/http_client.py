"""An MCP host's side of the API's own MCP endpoint, `POST /v1/threads/{id}/mcp`, on the official
MCP Python SDK (`mcp` on PyPI) and its streamable HTTP client.

Usage: http_client.py URL [API_KEY]. Connects with the key as a bearer token, runs the tools an
agent would, tries the endpoint without a key and with a wrong one, and prints one JSON document
of what it saw for the Rust test (cli/tests/mcp_http.rs) to check.
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from host import READY, call, checkpoints, first_steps, start_and_stop


async def processes(session):
    """A background process started, listed, read until it is ready, killed; an unknown one."""
    seen = {}
    await start_and_stop(
        session, seen, {"argv": ["python3", "-u", "-c", READY]}, {"signal": "KILL"}
    )
    seen["unknown"] = await call(session, "read_process_output", {"process_id": "nosuch1"})
    return seen


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}


async def raw_post(url, key):
    """A bare initialize POST with `key` (or none): the status and content type it gets."""
    headers = {"Accept": "application/json, text/event-stream"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    async with httpx2.AsyncClient() as client:
        response = await client.post(url, json=INITIALIZE, headers=headers)
        return {
            "status": response.status_code,
            "content_type": response.headers.get("content-type", ""),
            "session_id": response.headers.get("mcp-session-id"),
            "body": response.text[:2000],
        }


async def main(url, key):
    seen = {}
    headers = {"Authorization": f"Bearer {key}"} if key else None
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await first_steps(
                    session, seen, "echo one; echo two >&2; exit 3", "hello over http\n"
                )

                # Arguments that do not fit the schema: a tool error, not a protocol error.
                seen["bad_type"] = await call(session, "read_file", {"path": 42})
                seen["unknown_field"] = await call(session, "stat", {"path": "/home/user", "follow": True})
                seen["both"] = await call(session, "run_command", {"command": "true", "argv": ["true"]})
                seen["as_root"] = await call(session, "run_command", {"command": "id -u", "as_root": True})
                seen["as_user"] = await call(session, "run_command", {"command": "id -u"})
                seen["relative"] = await call(session, "read_file", {"path": "notes/a.txt"})
                seen["missing"] = await call(session, "read_file", {"path": "/home/user/nope"})

                seen["status"] = await call(session, "status", {})

                seen["processes"] = await processes(session)
                seen["checkpoints"] = await checkpoints(session, "agent-http-fork")

    seen["raw_with_key"] = await raw_post(url, key)
    seen["raw_without_key"] = await raw_post(url, None)
    seen["raw_wrong_key"] = await raw_post(url, "not-the-key-" + "x" * 32)
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
