"""What both MCP hosts of the tests (client.py on stdio, http_client.py over HTTP) do the same
way, on the official MCP Python SDK (`mcp` on PyPI): read the SDK's answers, and the first steps
an agent takes."""

import asyncio
import json


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


async def call(session, tool, arguments, **options):
    """Call `tool`: whether it answered with an error, and its answer."""
    answer = await session.call_tool(tool, arguments, **options)
    return {"error": is_error(answer), "result": content(answer)}


READY = "import time; print('ready', flush=True); time.sleep(60)"


async def read_until(session, process_id, wanted, seconds=30):
    """read_process_output from 0 until `wanted` shows up (or `seconds` pass): the text, the
    last answer."""
    text, after, last = "", 0, {}
    for _ in range(int(seconds / 0.2)):
        last = await call(session, "read_process_output", {"process_id": process_id, "after": after})
        if last["error"]:
            break
        text += last["result"].get("text", "")
        after = last["result"]["next"]
        if wanted in text:
            break
        await asyncio.sleep(0.2)
    return {"text": text, "last": last}


async def first_steps(session, seen, command, note):
    """The server's name and its tools (each with its parameters), `command` run with its
    progress, and `note` written to /home/user/notes/a.txt, read back and listed."""
    init = await session.initialize()
    seen["server"] = field(init, "server_info", "serverInfo").name
    tools = await session.list_tools()
    seen["tools"] = {
        tool.name: sorted((field(tool, "input_schema", "inputSchema") or {}).get("properties", {}))
        for tool in tools.tools
    }

    progress = []

    async def on_progress(done, total, message):
        progress.append(message)

    ran = await call(session, "run_command", {"command": command}, progress_callback=on_progress)
    seen["run"] = {**ran, "progress": progress}

    note_path = "/home/user/notes/a.txt"
    seen["write"] = await call(session, "write_file", {"path": note_path, "content": note})
    seen["read"] = await call(session, "read_file", {"path": note_path})
    seen["list"] = await call(session, "list_dir", {"path": "/home/user/notes"})


async def start_and_stop(session, seen, start, stop):
    """A background process started with `start`, listed, read until it is ready, stopped with
    `stop` and listed again."""
    seen["start"] = await call(session, "start_process", start)
    process_id = seen["start"]["result"].get("id", "none")
    seen["list"] = await call(session, "list_processes", {})
    seen["read"] = await read_until(session, process_id, "ready")
    seen["stop"] = await call(session, "stop_process", {"process_id": process_id, **stop})
    seen["list_after_stop"] = await call(session, "list_processes", {})


async def checkpoints(session, fork_thread):
    """A checkpoint taken with a label, the file changed, the checkpoints listed, the file put
    back by restore (a sleeper stopped on the way), a fork into `fork_thread`; and what bad
    checkpoint ids and an existing fork thread answer."""
    seen = {}
    path = "/home/user/cp.txt"
    await session.call_tool("write_file", {"path": path, "content": "before\n"})
    seen["take"] = await call(session, "checkpoint", {"label": "before the edit"})
    cp = seen["take"]["result"].get("id", "none")
    await session.call_tool("write_file", {"path": path, "content": "after\n"})
    await session.call_tool("start_process", {"command": "exec sleep 1234"})
    seen["list"] = await call(session, "list_checkpoints", {})
    seen["restore"] = await call(session, "restore", {"checkpoint": cp})
    seen["read"] = await call(session, "read_file", {"path": path})
    seen["fork"] = await call(session, "fork", {"thread": fork_thread})
    seen["fork_again"] = await call(session, "fork", {"thread": fork_thread})
    seen["bad_id"] = await call(session, "restore", {"checkpoint": "cp-../../x"})
    seen["unknown"] = await call(session, "restore", {"checkpoint": "cp-00000000000000000000"})
    seen["bad_label"] = await call(session, "checkpoint", {"label": "x" * 201})
    return seen
