"""Real MCP servers for the tests, made with the official `mcp` SDK (and one raw, malformed one).

`python -m tests.mcp_servers KIND [PORT]`:
- `basic` (stdio): echo, add, a secret quoted back, an image, an isError result, a slow call,
  a tool that adds another and says `notifications/tools/list_changed`; a resource and a prompt.
- `http PORT` (Streamable HTTP on 127.0.0.1:PORT/mcp): `lookup` and `whoami` (the bearer it got).
- `crash` (stdio): `ok`, and `die`, which ends the process mid-call.
- `bad` (stdio): `big` answers 2 MB; `garbage` answers a tools/call result that is no tool result.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer


def basic() -> MCPServer:
    server = MCPServer("basic")

    @server.tool(description="Echo the text back")
    def echo(text: str) -> str:
        return f"echo: {text}"

    @server.tool(description="Add two integers")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="Quote the server's secret back (a careless server)")
    def leak() -> str:
        return f"my token is {os.environ.get('BASIC_TOKEN', '')}"

    @server.tool(description="A red pixel")
    def pixel() -> list:
        from mcp_types import ImageContent, TextContent

        return [TextContent(text="a pixel"), ImageContent(data=base64.b64encode(b"\x89PNG....").decode(),
                                                          mime_type="image/png")]

    @server.tool(description="Always fails")
    def broken() -> str:
        raise ValueError("the broken tool broke")

    @server.tool(description="Sleep then answer")
    async def slow(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "done"

    @server.tool(description="Add the `late` tool and tell the client")
    async def grow(ctx: Context) -> str:
        def late() -> str:
            """A tool added while the session runs"""
            return "late answer"

        server.add_tool(late)
        await ctx.session.send_tool_list_changed()  # the legacy (session) way: the gateway opens those
        return "grown"

    @server.resource("note://readme", description="A note")
    def readme() -> str:
        return "the readme text"

    @server.prompt(description="Greet someone")
    def greet(name: str) -> str:
        return f"Say hello to {name}"

    return server


def http_server() -> MCPServer:
    server = MCPServer("remote")

    @server.tool(description="Look a word up")
    def lookup(word: str) -> dict:
        return {"word": word, "length": len(word)}

    @server.tool(description="The authorization header this server received")
    def whoami(ctx: Context) -> str:
        headers = ctx.headers or {}
        return str(headers.get("authorization", "none"))

    return server


def crash() -> MCPServer:
    server = MCPServer("crash")

    @server.tool(description="Answers")
    def ok() -> str:
        return f"ok from {os.getpid()}"

    @server.tool(description="Ends the server process")
    def die() -> str:
        os._exit(3)

    return server


def bad() -> None:
    """A stdio server by hand: it initializes and lists properly, then answers calls badly."""
    tools = [{"name": "big", "inputSchema": {"type": "object"}}, {"name": "garbage", "inputSchema": {"type": "object"}}]
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if "id" not in message:
            continue
        method, rid = message.get("method"), message["id"]
        if method == "initialize":
            result: object = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                              "serverInfo": {"name": "bad", "version": "0"}}
        elif method == "tools/list":
            result = {"tools": tools}
        elif method == "tools/call" and message["params"]["name"] == "big":
            result = {"content": [{"type": "text", "text": "x" * (2 << 20)}]}
        elif method == "tools/call":
            sys.stdout.write("this line is not JSON\n")
            result = {"content": "not a list", "isError": "maybe"}
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "bad":
        bad()
    elif kind == "http":
        http_server().run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        {"basic": basic, "crash": crash}[kind]().run("stdio")
