"""A fault-injecting OpenAI-compatible server on loopback, for tests (canned tokens, no model).

Raw HTTP/1.1 over asyncio streams (one request per connection, chunked bodies), so that
every fault is exact: a stall before the response headers or after them, a stall
mid-stream, a connection cut mid-chunk, a stream that ends cleanly without ``[DONE]``,
5xx and 429 with ``Retry-After``, malformed SSE, missing or inconsistent usage, and a
server that dies mid-request (stops listening and drops every open connection).

Which fault a request gets: a marker ``FAULT:<name>`` anywhere in its prompt wins; else
the next entry of ``script`` (one per new prompt, the probe excepted; a retry gets what
its first attempt got); else ``default``. ``<name>xN`` (e.g. ``503x2``) applies the
fault to the first N attempts of that prompt and answers normally after. A normal
answer streams ``max_tokens`` chunks of one token each (``t0 t1 ...``; with ``vary``, a text
fixed per prompt; token IDs 100, 101, ...), a finish chunk, a usage chunk and ``[DONE]``.

In-process: ``with FaultServer(...) as fs: fs.url``. As a process (to be SIGKILLed):
``python -m tests.support.fault_server --port-file F [--script ok,ok,stall_mid]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROMPT_IDS = [1, 2, 3]
FAULTS = ("ok", "stop", "stall_headers", "stall_first", "stall_mid", "trickle", "500", "503",
          "429", "400", "malformed_first", "malformed_mid", "not_object", "bad_choices",
          "bad_text", "bad_ids", "cut_nodone", "cut_mid", "reset_first", "reset_mid",
          "no_usage", "usage_low", "usage_high", "usage_str", "usage_prompt", "die",
          "401echo")


@dataclass
class Seen:
    """One request the server received."""

    path: str
    fault: str
    t: float  # time.perf_counter() when its headers were read
    sent: list[float] = field(default_factory=list)  # when each token chunk was written


class _Died(Exception):
    pass


class FaultServer:
    def __init__(self, default: str = "ok", script: list[str] | None = None,
                 owned_by: str = "vllm", retry_after: str = "1", port: int = 0,
                 vary: bool = False, max_logprobs: int = 20, drop_renders: int = 0,
                 stream_prompt_ids: bool = True) -> None:
        self.default, self.script, self.vary = default, list(script or []), vary
        # the first N chat renders (/apply-template) dropped without an answer,
        # as a server closing a kept-alive connection just as the client reuses it
        self.drop_renders = drop_renders
        # False: chat streams carry no prompt token IDs (as llama-server's), so the
        # client renders chats through /apply-template first
        self.stream_prompt_ids = stream_prompt_ids
        self.max_logprobs = max_logprobs  # as vLLM's --max-logprobs
        self.owned_by, self.retry_after, self.port = owned_by, retry_after, port
        self.seen: list[Seen] = []
        self.attempts: dict[str, int] = {}
        self.assigned: dict[str, str] = {}
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def completions(self) -> list[Seen]:
        return [s for s in self.seen if s.fault not in ("get", "probe")]

    # -- lifetime -----------------------------------------------------------------------

    def __enter__(self) -> FaultServer:
        self._thread = threading.Thread(target=lambda: asyncio.run(self.serve()), daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("fault server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(30)

    async def serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        await self._stop.wait()
        self._die()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _die(self) -> None:
        """Stop listening and drop every open connection, as a killed process would."""
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.transport.abort()

    # -- one connection -----------------------------------------------------------------

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            method, path = head.split(" ", 2)[:2]
            length = re.search(r"(?im)^content-length:\s*(\d+)", head)
            raw = await reader.readexactly(int(length.group(1))) if length else b""
            if method == "GET":
                await self._get(writer, path)
            else:
                auth = re.search(r"(?im)^authorization:\s*(.*?)\r?$", head)
                await self._post(writer, path, json.loads(raw or b"{}"),
                                 auth.group(1) if auth else "")
            await writer.drain()
        except (_Died, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _get(self, w: asyncio.StreamWriter, path: str) -> None:
        self.seen.append(Seen(path, "get", time.perf_counter()))
        if path == "/v1/models":
            doc: Any = {"data": [{"id": "fault-model", "owned_by": self.owned_by}]}
            _json(w, 200, doc)
        elif path == "/version":
            _json(w, 200, {"version": "fault-1.0"})
        else:
            _json(w, 404, {"detail": "not found"})

    def _fault_for(self, body: dict[str, Any]) -> tuple[str, str]:
        text = json.dumps(body.get("messages") or body.get("prompt"))
        marker = re.search(r"FAULT:(\w+)", text)
        if marker:
            name = marker.group(1)
        elif "Say OK." in text or text == '"OK"':
            return "probe", "ok"
        elif text in self.assigned:  # a retry gets the fault its first attempt got
            name = self.assigned[text]
        else:
            name = self.script.pop(0) if self.script else self.default
        self.assigned[text] = name
        parts = re.fullmatch(r"(.+?)(?:x(\d+))?", name)
        assert parts is not None
        fault, times = parts.group(1), parts.group(2)
        n = self.attempts[text] = self.attempts.get(text, 0) + 1
        if times and n > int(times):
            fault = "ok"
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}")
        return fault, fault

    async def _post(self, w: asyncio.StreamWriter, path: str, body: dict[str, Any],
                    auth: str = "") -> None:
        if path == "/apply-template":  # as llama-server's: chat messages to prompt text
            self.seen.append(Seen(path, "render", time.perf_counter()))
            if self.drop_renders > 0:
                self.drop_renders -= 1
                w.transport.abort()
                raise _Died
            text = " ".join(str(m.get("content")) for m in body.get("messages") or [])
            return _json(w, 200, {"prompt": f"<chat> {text}"})
        if path == "/tokenize":  # as vLLM's: chat messages or a prompt to token IDs
            if body.get("messages"):  # the IDs its streams report for any chat prompt
                return _json(w, 200, {"tokens": PROMPT_IDS})
            said = body.get("prompt", body.get("content", ""))  # vLLM's key, llama-server's
            if str(said).startswith("<chat>"):  # a rendered chat (/apply-template's)
                return _json(w, 200, {"tokens": PROMPT_IDS})  # the IDs its usage counts
            text = json.dumps(body.get("prompt"))
            return _json(w, 200, {"tokens": [b % 251 for b in text.encode()[:64]]})
        if "prompt_logprobs" in body:  # as vLLM's: scoring, not generation (no faults)
            self.seen.append(Seen(path, "score", time.perf_counter()))
            if int(body["prompt_logprobs"]) > self.max_logprobs:  # vLLM's words
                return _json(w, 400, {"object": "error", "message": (
                    f"Requested prompt logprobs of {body['prompt_logprobs']}, which is "
                    f"greater than max allowed: {self.max_logprobs}")})
            return _json(w, 200, {"choices": [{"index": 0, "text": "x", "prompt_logprobs":
                                               _prompt_logprobs(body)}]})
        label, fault = self._fault_for(body)
        seen = Seen(path, label, time.perf_counter())
        self.seen.append(seen)
        if fault == "stall_headers":
            await asyncio.sleep(3600)
        if fault == "401echo":  # a server that quotes the credentials it refused
            key = auth.split(" ", 1)[-1]
            return _json(w, 401, {"error": {"message": f"invalid key {key} (got {auth!r})"}})
        if fault in ("500", "503", "429", "400"):
            extra = {"Retry-After": self.retry_after} if fault in ("429", "503") else {}
            return _json(w, int(fault), {"error": {"message": f"injected {fault}"}}, extra)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        await w.drain()
        await self._stream(w, fault, body, path.endswith("chat/completions"), seen)

    async def _stream(self, w: asyncio.StreamWriter, fault: str, body: dict[str, Any],
                      chat: bool, seen: Seen) -> None:
        n = int(body.get("max_tokens") or 16)
        if fault == "stop":
            n = min(n, 3)

        async def send(data: str) -> None:
            payload = f"data: {data}\n\n".encode()
            w.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            await w.drain()

        await send(json.dumps({**({"prompt_token_ids": PROMPT_IDS} if self.stream_prompt_ids
                                  else {}),
                               "choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
        early = {"stall_first": "stall", "trickle": "trickle", "malformed_first": "{oops",
                 "reset_first": "reset", "not_object": "[1, 2]", "bad_choices": '{"choices": 7}'}
        mid = {"stall_mid": "stall", "malformed_mid": '{"choices": [{"ind', "cut_mid": "end",
               "reset_mid": "reset", "die": "die"}
        for i in range(n):
            action = early.get(fault) if i == 0 else mid.get(fault) if i == 2 else None
            if action == "stall":
                await asyncio.sleep(3600)
            elif action == "trickle":
                while True:
                    w.write(b"8\r\n: ping\n\n\r\n")
                    await w.drain()
                    await asyncio.sleep(0.05)
            elif action == "reset":
                w.write(b"40\r\ndata: {\"choices")  # half a chunk, then the connection drops
                await w.drain()
                w.transport.abort()
                raise _Died
            elif action == "die":
                self._die()
                raise _Died
            elif action == "end":
                w.write(b"0\r\n\r\n")
                return
            elif action is not None:
                await send(action)
                continue
            c: dict[str, Any] = {"index": 0, "token_ids": [100 + i], "finish_reason": None}
            piece: Any = f"t{i} "
            if self.vary:  # a different (but fixed) text per prompt: "t7 t12 ..."
                salt = zlib.crc32(json.dumps(body.get("messages") or body.get("prompt"))
                                  .encode())
                piece = f"t{(salt + 5 * i) % 97} "
            if fault == "bad_text" and i == 1:
                piece = 5
            if fault == "bad_ids" and i == 1:
                c["token_ids"] = ["x"]
            c.update({"delta": {"content": piece}} if chat else {"text": piece})
            await send(json.dumps({"choices": [c]}))
            seen.sent.append(time.perf_counter())
        finish = "stop" if fault == "stop" else "length"
        await send(json.dumps({"choices": [{"index": 0, "delta": {}, "text": "",
                                            "finish_reason": finish}]}))
        usage: dict[str, Any] = {"prompt_tokens": len(PROMPT_IDS), "completion_tokens": n}
        usage |= {"usage_low": {"completion_tokens": max(n - 2, 0)},
                  "usage_high": {"completion_tokens": n + 5},
                  "usage_str": {"completion_tokens": "many"},
                  "usage_prompt": {"prompt_tokens": 7}}.get(fault, {})
        if fault != "no_usage":
            await send(json.dumps({"choices": [], "usage": usage}))
        if fault != "cut_nodone":
            await send("[DONE]")
        w.write(b"0\r\n\r\n")


def _json(w: asyncio.StreamWriter, code: int, doc: Any, headers: dict[str, str] | None = None,
          ) -> None:
    body = json.dumps(doc).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    w.write(f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: "
            f"{len(body)}\r\nConnection: close\r\n{extra}\r\n".encode() + body)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", type=Path, required=True)
    ap.add_argument("--script", default="")
    ap.add_argument("--default", default="ok")
    a = ap.parse_args()
    server = FaultServer(a.default, [s for s in a.script.split(",") if s])

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        await asyncio.to_thread(server._ready.wait)
        a.port_file.write_text(str(server.port))
        await task

    asyncio.run(run())


if __name__ == "__main__":
    main()


def _prompt_logprobs(body: dict[str, Any]) -> list[Any]:
    """vLLM's ``prompt_logprobs`` for a prompt of token IDs: null first, then per
    position the top-k (a fixed, made-up distribution) and the prompt token itself."""
    ids, k = body["prompt"], int(body["prompt_logprobs"])
    rows: list[Any] = [None]
    for token in ids[1:]:
        row = {str(1000 + r): {"logprob": -0.5 - r, "rank": r + 1} for r in range(k)}
        row.setdefault(str(token), {"logprob": -9.0, "rank": 5000})
        rows.append(row)
    return rows
