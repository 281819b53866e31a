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


def field(obj, snake, camel):
    """An attribute under the SDK's current name (snake_case since 2.0) or its older one."""
    value = getattr(obj, snake, None)
    return value if value is not None else getattr(obj, camel, None)


def content(result):
    """The tool's answer: its structured content, or its text parsed as JSON."""
    structured = field(result, "structured_content", "structuredContent")
    if structured is not None:
        return structured
    return json.loads(result.content[0].text)


def is_error(result):
    return bool(field(result, "is_error", "isError"))


READY = "import time; print('ready', flush=True); time.sleep(60)"


async def processes(session):
    """A background process started, listed, read until it is ready, stopped; an unknown one."""
    seen = {}
    started = await session.call_tool("start_process", {"argv": ["python3", "-u", "-c", READY]})
    seen["start"] = {"error": is_error(started), "result": content(started)}
    process_id = seen["start"]["result"].get("id", "none")
    listed = await session.call_tool("list_processes", {})
    seen["list"] = {"error": is_error(listed), "result": content(listed)}
    text, after, last = "", 0, {}
    for _ in range(150):
        answer = await session.call_tool(
            "read_process_output", {"process_id": process_id, "after": after}
        )
        last = {"error": is_error(answer), "result": content(answer)}
        if last["error"]:
            break
        text += last["result"].get("text", "")
        after = last["result"]["next"]
        if "ready" in text:
            break
        await asyncio.sleep(0.2)
    seen["read"] = {"text": text, "last": last}
    stopped = await session.call_tool("stop_process", {"process_id": process_id, "signal": "KILL"})
    seen["stop"] = {"error": is_error(stopped), "result": content(stopped)}
    listed = await session.call_tool("list_processes", {})
    seen["list_after_stop"] = {"error": is_error(listed), "result": content(listed)}
    unknown = await session.call_tool("read_process_output", {"process_id": "nosuch1"})
    seen["unknown"] = {"error": is_error(unknown), "result": content(unknown)}
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
                init = await session.initialize()
                seen["server"] = field(init, "server_info", "serverInfo").name
                tools = await session.list_tools()
                seen["tools"] = {
                    tool.name: sorted(
                        (field(tool, "input_schema", "inputSchema") or {}).get("properties", {})
                    )
                    for tool in tools.tools
                }

                progress = []

                async def on_progress(done, total, message):
                    progress.append(message)

                ran = await session.call_tool(
                    "run_command",
                    {"command": "echo one; echo two >&2; exit 3"},
                    progress_callback=on_progress,
                )
                seen["run"] = {"error": is_error(ran), "result": content(ran), "progress": progress}

                wrote = await session.call_tool(
                    "write_file", {"path": "/home/user/notes/a.txt", "content": "hello over http\n"}
                )
                seen["write"] = {"error": is_error(wrote), "result": content(wrote)}
                read_back = await session.call_tool("read_file", {"path": "/home/user/notes/a.txt"})
                seen["read"] = {"error": is_error(read_back), "result": content(read_back)}
                listed = await session.call_tool("list_dir", {"path": "/home/user/notes"})
                seen["list"] = {"error": is_error(listed), "result": content(listed)}

                # Arguments that do not fit the schema: a tool error, not a protocol error.
                bad = await session.call_tool("read_file", {"path": 42})
                seen["bad_type"] = {"error": is_error(bad), "result": content(bad)}
                unknown = await session.call_tool("stat", {"path": "/home/user", "follow": True})
                seen["unknown_field"] = {"error": is_error(unknown), "result": content(unknown)}
                both = await session.call_tool("run_command", {"command": "true", "argv": ["true"]})
                seen["both"] = {"error": is_error(both), "result": content(both)}
                relative = await session.call_tool("read_file", {"path": "notes/a.txt"})
                seen["relative"] = {"error": is_error(relative), "result": content(relative)}
                missing = await session.call_tool("read_file", {"path": "/home/user/nope"})
                seen["missing"] = {"error": is_error(missing), "result": content(missing)}

                status = await session.call_tool("status", {})
                seen["status"] = {"error": is_error(status), "result": content(status)}

                seen["processes"] = await processes(session)

    seen["raw_with_key"] = await raw_post(url, key)
    seen["raw_without_key"] = await raw_post(url, None)
    seen["raw_wrong_key"] = await raw_post(url, "not-the-key-" + "x" * 32)
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
