"""An MCP host's side of `threadbox mcp`, on the official MCP Python SDK (`mcp` on PyPI).

Spawns `threadbox mcp` over stdio (the command line after `--`), runs the tools an agent would,
and prints one JSON document of what it saw for the Rust test (cli/tests/mcp_stdio.rs) to check.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


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
ECHO_LINE = "import sys; print('got', sys.stdin.readline().strip(), flush=True)"


async def read_until(session, process_id, wanted, seconds=30):
    """read_process_output from 0 until `wanted` shows up (or `seconds` pass): the text, the
    last answer."""
    text, after, last = "", 0, {}
    for _ in range(int(seconds / 0.2)):
        answer = await session.call_tool(
            "read_process_output", {"process_id": process_id, "after": after}
        )
        last = {"error": is_error(answer), "result": content(answer)}
        if last["error"]:
            break
        text += last["result"].get("text", "")
        after = last["result"]["next"]
        if wanted in text:
            break
        await asyncio.sleep(0.2)
    return {"text": text, "last": last}


async def processes(session):
    """A background process started, listed, read until it is ready, stopped; another one
    written to; an unknown one."""
    seen = {}
    started = await session.call_tool(
        "start_process", {"argv": ["python3", "-u", "-c", READY], "idle_timeout_seconds": 120}
    )
    seen["start"] = {"error": is_error(started), "result": content(started)}
    process_id = seen["start"]["result"].get("id", "none")
    listed = await session.call_tool("list_processes", {})
    seen["list"] = {"error": is_error(listed), "result": content(listed)}
    seen["read"] = await read_until(session, process_id, "ready")
    stopped = await session.call_tool("stop_process", {"process_id": process_id})
    seen["stop"] = {"error": is_error(stopped), "result": content(stopped)}
    listed = await session.call_tool("list_processes", {})
    seen["list_after_stop"] = {"error": is_error(listed), "result": content(listed)}

    echo = await session.call_tool("start_process", {"command": f'python3 -u -c "{ECHO_LINE}"'})
    echo_id = content(echo).get("id", "none")
    wrote = await session.call_tool(
        "write_process_input", {"process_id": echo_id, "text": "hello\n"}
    )
    seen["input"] = {"error": is_error(wrote), "result": content(wrote)}
    seen["echo"] = await read_until(session, echo_id, "got hello")

    unknown = await session.call_tool("stop_process", {"process_id": "nosuch1"})
    seen["unknown"] = {"error": is_error(unknown), "result": content(unknown)}
    return seen


async def main(command):
    seen = {}
    server = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(server) as (read, write):
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
                {"command": "echo one; sleep 1; echo two >&2; exit 3"},
                progress_callback=on_progress,
            )
            seen["run"] = {"error": is_error(ran), "result": content(ran), "progress": progress}

            wrote = await session.call_tool(
                "write_file", {"path": "/home/user/notes/a.txt", "content": "hello from mcp\n"}
            )
            seen["write"] = {"error": is_error(wrote), "result": content(wrote)}
            read_back = await session.call_tool("read_file", {"path": "/home/user/notes/a.txt"})
            seen["read"] = {"error": is_error(read_back), "result": content(read_back)}
            listed = await session.call_tool("list_dir", {"path": "/home/user/notes"})
            seen["list"] = {"error": is_error(listed), "result": content(listed)}

            made = await session.call_tool("make_dir", {"path": "/home/user/src/deep"})
            seen["make_dir"] = {"error": is_error(made), "result": content(made)}
            await session.call_tool(
                "write_file", {"path": "/home/user/src/deep/main.rs", "content": "fn main() {}\n"}
            )
            globbed = await session.call_tool("glob", {"path": "/home/user", "glob": "src/**/*.rs"})
            seen["glob"] = {"error": is_error(globbed), "result": content(globbed)}
            grepped = await session.call_tool("grep", {"path": "/home/user/src", "pattern": "fn ma+in"})
            seen["grep"] = {"error": is_error(grepped), "result": content(grepped)}

            await session.call_tool(
                "run_command", {"command": "head -c 3000000 /dev/zero > /home/user/big"}
            )
            big = await session.call_tool("read_file", {"path": "/home/user/big"})
            seen["big"] = {"error": is_error(big), "result": content(big)}

            missing = await session.call_tool("read_file", {"path": "/home/user/nope"})
            seen["missing"] = {"error": is_error(missing), "result": content(missing)}
            both = await session.call_tool("run_command", {"command": "true", "argv": ["true"]})
            seen["both"] = {"error": is_error(both), "result": content(both)}

            status = await session.call_tool("status", {})
            seen["status"] = {"error": is_error(status), "result": content(status)}

            seen["processes"] = await processes(session)
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[sys.argv.index("--") + 1 :]))
