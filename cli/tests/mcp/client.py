"""An MCP host's side of `threadbox mcp`, on the official MCP Python SDK (`mcp` on PyPI).

Spawns `threadbox mcp` over stdio (the command line after `--`), runs the tools an agent would,
and prints one JSON document of what it saw for the Rust test (cli/tests/mcp_stdio.rs) to check.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from host import READY, call, checkpoints, first_steps, read_until, start_and_stop


ECHO_LINE = "import sys; print('got', sys.stdin.readline().strip(), flush=True)"


async def processes(session):
    """A background process started, listed, read until it is ready, stopped; another one
    written to; an unknown one."""
    seen = {}
    await start_and_stop(
        session,
        seen,
        {"argv": ["python3", "-u", "-c", READY], "idle_timeout_seconds": 120},
        {},
    )

    echo = await call(session, "start_process", {"command": f'python3 -u -c "{ECHO_LINE}"'})
    echo_id = echo["result"].get("id", "none")
    seen["input"] = await call(
        session, "write_process_input", {"process_id": echo_id, "text": "hello\n"}
    )
    seen["echo"] = await read_until(session, echo_id, "got hello")

    seen["unknown"] = await call(session, "stop_process", {"process_id": "nosuch1"})
    return seen


async def main(command):
    seen = {}
    server = StdioServerParameters(command=command[0], args=command[1:])
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await first_steps(
                session, seen, "echo one; sleep 1; echo two >&2; exit 3", "hello from mcp\n"
            )

            seen["make_dir"] = await call(session, "make_dir", {"path": "/home/user/src/deep"})
            await session.call_tool(
                "write_file", {"path": "/home/user/src/deep/main.rs", "content": "fn main() {}\n"}
            )
            seen["glob"] = await call(session, "glob", {"path": "/home/user", "glob": "src/**/*.rs"})
            seen["grep"] = await call(session, "grep", {"path": "/home/user/src", "pattern": "fn ma+in"})

            await session.call_tool(
                "run_command", {"command": "head -c 3000000 /dev/zero > /home/user/big"}
            )
            seen["big"] = await call(session, "read_file", {"path": "/home/user/big"})

            seen["missing"] = await call(session, "read_file", {"path": "/home/user/nope"})
            seen["both"] = await call(session, "run_command", {"command": "true", "argv": ["true"]})

            seen["status"] = await call(session, "status", {})

            seen["processes"] = await processes(session)
            seen["checkpoints"] = await checkpoints(session, "agent-fork")
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[sys.argv.index("--") + 1 :]))
