"""Soak test: a bounded loop (a request count AND a time limit) of mixed good, bad, unauthorised and
disconnecting requests against a server on 127.0.0.1.

At the end it checks that every good request got a full answer, every bad one a 400 (and every
wrong key a 401), no request got a 5xx, the server's memory (RSS, from /health) stayed flat after
warm-up, every batch slot is free again, and /health is ok. Exit code 0 only if all hold.

    python -m engine.tools.soak --requests 200 --seconds 180 --threads 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field

from engine.config import DEFAULT_MAX_TOKENS
from engine.tools.loadtest import CALLER_TURNS, SpawnedServer, load_scenario

BAD_BODIES: list[tuple[str, object]] = [
    ("missing messages", {"model": "x"}),
    ("messages not a list", {"messages": "hi"}),
    ("empty messages", {"messages": []}),
    ("unknown role", {"messages": [{"role": "robot", "content": "hi"}]}),
    ("content of a wrong type", {"messages": [{"role": "user", "content": {"a": 1}}]}),
    ("unknown effort", {"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "max"}),
    ("invalid tool schema", {"messages": [{"role": "user", "content": "hi"}], "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": 3}}}]}),
    ("max_tokens out of range", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 999999}),
    ("max_tokens of a wrong type", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": [1]}),
    ("oversized context", {"messages": [{"role": "user", "content": "word " * 6000}]}),
    ("not JSON", b"{\"messages\": [}"),
    ("not an object", b"[]"),
]


@dataclass
class Tally:
    sent: Counter = field(default_factory=Counter)
    ok: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    rss: list[tuple[int, float]] = field(default_factory=list)  # (requests done, MB)
    good_tokens: int = 0

    def fail(self, kind: str, why: str) -> None:
        if len(self.failures) < 20:
            self.failures.append(f"{kind}: {why}")


class Soak:
    def __init__(self, base_url: str, api_key: str | None, args) -> None:
        self.base_url, self.api_key, self.args = base_url, api_key, args
        self.rng = random.Random(args.seed)
        self.system, self.tools = load_scenario()
        self.tally = Tally()
        self.done = 0
        # A small pool of calls, each a few turns long: sessions stay bounded, as on a real line.
        self.calls = {f"soak-call-{i}": [] for i in range(max(args.calls, args.concurrency))}
        self.lines = {c: CALLER_TURNS[i % len(CALLER_TURNS)] for i, c in enumerate(self.calls)}
        self.busy: set[str] = set()  # a call has one turn in flight at a time, as on a phone line

    def headers(self, key: str | None = None) -> dict:
        k = self.api_key if key is None else key
        return {"Authorization": f"Bearer {k}"} if k else {}

    def pick(self) -> str:
        kinds = ["good_stream", "good_plain", "bad", "disconnect"] + (["auth"] if self.api_key else [])
        weights = [30, 25, 25, 15] + ([5] if self.api_key else [])
        return self.rng.choices(kinds, weights)[0]

    async def run(self) -> dict:
        import httpx

        deadline = time.monotonic() + self.args.seconds
        async with httpx.AsyncClient(base_url=self.base_url, timeout=self.args.request_timeout) as http:
            self.http = http
            plan = iter(range(self.args.requests))

            async def worker() -> None:
                for _ in plan:
                    if time.monotonic() > deadline:
                        return
                    kind = self.pick()
                    self.tally.sent[kind] += 1
                    try:
                        await getattr(self, kind)()
                    except Exception as e:  # a client-side failure is a failed request, never a crash
                        self.tally.fail(kind, f"{type(e).__name__}: {e}")
                    self.done += 1
                    if self.done % self.args.rss_every == 0:
                        await self.sample_rss()

            t0 = time.monotonic()
            await asyncio.gather(*(worker() for _ in range(self.args.concurrency)))
            elapsed = time.monotonic() - t0
            idle = await self.wait_idle()
            await self.sample_rss()
            health = (await http.get("/health")).json()
        return self.verdict(elapsed, idle, health)

    # -- the kinds of request ------------------------------------------------------------------
    def good_body(self) -> tuple[dict, str]:
        call = self.rng.choice([c for c in self.calls if c not in self.busy])
        self.busy.add(call)
        history = self.calls[call]
        if len(history) >= 2 * self.args.turns:
            history.clear()  # the call ends; a new one starts under the same line
        lines = self.lines[call]
        history.append({"role": "user", "content": lines[(len(history) // 2) % len(lines)]})
        body = {"model": "soak", "messages": [{"role": "system", "content": self.system}, *history],
                "tools": self.tools, "max_tokens": self.args.max_tokens,
                "reasoning_effort": self.rng.choice(["instant", "low"])}
        return body, call

    async def good_plain(self) -> None:
        await self._turn(self._plain)

    async def good_stream(self) -> None:
        await self._turn(self._stream)

    async def _turn(self, fn) -> None:
        """One turn of a call; the call's history keeps the turn only if it was answered."""
        body, call = self.good_body()
        before = len(self.calls[call]) - 1
        reply = None
        try:
            reply = await fn(body, call)
        finally:
            if reply is None:
                del self.calls[call][before:]
            else:
                self.calls[call].append({"role": "assistant", "content": reply})
            self.busy.discard(call)

    async def _plain(self, body: dict, call: str) -> str | None:
        r = await self.http.post("/v1/chat/completions", json=body, headers={**self.headers(), "X-Session-Id": call})
        self.tally.statuses[r.status_code] += 1
        if r.status_code != 200:
            return self.tally.fail("good_plain", f"HTTP {r.status_code}: {r.text[:200]}")
        data = r.json()
        choice = data["choices"][0]
        if choice.get("finish_reason") not in ("stop", "length", "tool_calls") or data["usage"]["completion_tokens"] < 1:
            return self.tally.fail("good_plain", f"incomplete answer: {json.dumps(data)[:200]}")
        self.tally.good_tokens += data["usage"]["completion_tokens"]
        self.tally.ok["good_plain"] += 1
        return choice["message"].get("content") or ""

    async def _stream(self, body: dict, call: str) -> str | None:
        body.update(stream=True, stream_options={"include_usage": True})
        text, finish, usage, done = [], None, None, False
        async with self.http.stream("POST", "/v1/chat/completions", json=body,
                                    headers={**self.headers(), "X-Session-Id": call}) as r:
            self.tally.statuses[r.status_code] += 1
            if r.status_code != 200:
                return self.tally.fail("good_stream", f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
            async for line in r.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    done = True
                    break
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    return self.tally.fail("good_stream", f"error event: {chunk['error']}")
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for ch in chunk.get("choices", []):
                    text.append(ch["delta"].get("content") or "")
                    finish = ch.get("finish_reason") or finish
        if not done or finish is None or not usage or usage["completion_tokens"] < 1:
            return self.tally.fail("good_stream", f"incomplete stream: done={done} finish={finish} usage={usage}")
        self.tally.good_tokens += usage["completion_tokens"]
        self.tally.ok["good_stream"] += 1
        return "".join(text).strip()

    async def bad(self) -> None:
        name, body = self.rng.choice(BAD_BODIES)
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        r = await self.http.post("/v1/chat/completions", content=content,
                                 headers={**self.headers(), "Content-Type": "application/json"})
        self.tally.statuses[r.status_code] += 1
        err = r.json().get("error", {}) if r.headers.get("content-type", "").startswith("application/json") else {}
        if r.status_code != 400 or set(err) != {"message", "type", "param", "code"}:
            return self.tally.fail("bad", f"{name}: HTTP {r.status_code}: {r.text[:200]}")
        self.tally.ok["bad"] += 1

    async def auth(self) -> None:
        r = await self.http.post("/v1/chat/completions", headers=self.headers("wrong-" + secrets.token_hex(4)),
                                 json={"messages": [{"role": "user", "content": "hi"}]})
        self.tally.statuses[r.status_code] += 1
        if r.status_code != 401 or r.json().get("error", {}).get("code") != "invalid_api_key":
            return self.tally.fail("auth", f"HTTP {r.status_code}: {r.text[:200]}")
        self.tally.ok["auth"] += 1

    async def disconnect(self) -> None:
        body = {"messages": [{"role": "system", "content": self.system},
                             {"role": "user", "content": self.rng.choice(CALLER_TURNS)[0]}],
                "max_tokens": DEFAULT_MAX_TOKENS, "stream": True, "reasoning_effort": "instant"}
        async with self.http.stream("POST", "/v1/chat/completions", json=body, headers=self.headers()) as r:
            self.tally.statuses[r.status_code] += 1
            if r.status_code != 200:
                return self.tally.fail("disconnect", f"HTTP {r.status_code}")
            async for line in r.aiter_lines():
                if line.startswith("data: ") and ("content" in line or "reasoning_content" in line):
                    break  # hang up after the first chunk, mid-answer
        self.tally.ok["disconnect"] += 1

    # -- measurements ----------------------------------------------------------------------------
    async def sample_rss(self) -> None:
        h = (await self.http.get("/health")).json()
        self.tally.rss.append((self.done, h["rss_mb"]))

    async def wait_idle(self, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            h = (await self.http.get("/health")).json()
            if h["active"] == 0 and h["queued"] == 0:
                return True
            await asyncio.sleep(0.2)
        return False

    def verdict(self, elapsed: float, idle: bool, health: dict) -> dict:
        t, a = self.tally, self.args
        good_sent = t.sent["good_stream"] + t.sent["good_plain"]
        good_ok = t.ok["good_stream"] + t.ok["good_plain"]
        warm = [mb for n, mb in t.rss if n >= a.warmup]
        base = warm[0] if warm else (t.rss[0][1] if t.rss else 0.0)
        final = t.rss[-1][1] if t.rss else 0.0
        checks = {
            "every good request got a full answer": good_ok == good_sent and good_sent > 0,
            "every bad body got a 400": t.ok["bad"] == t.sent["bad"],
            "every wrong key got a 401": t.ok["auth"] == t.sent["auth"],
            "no 5xx": not any(code >= 500 for code in t.statuses),
            f"RSS grew <= {a.rss_tolerance_mb} MB after warm-up": final - base <= a.rss_tolerance_mb,
            "all slots free at the end": idle and health.get("active") == 0 and health.get("queued") == 0,
            "/health ok": health.get("status") == "ok",
        }
        return {
            "passed": all(checks.values()),
            "checks": checks,
            "requests": self.done,
            "elapsed_s": round(elapsed, 1),
            "sent": dict(t.sent),
            "ok": dict(t.ok),
            "statuses": {str(k): v for k, v in sorted(t.statuses.items())},
            "good_completion_tokens": t.good_tokens,
            "rss_mb": {"first": t.rss[0][1] if t.rss else None, "after_warmup": base, "final": final,
                       "max": max((mb for _, mb in t.rss), default=None), "samples": len(t.rss),
                       "series": t.rss},
            "server": {k: health.get(k) for k in ("completed", "failed", "cancelled", "rejected_full", "timed_out",
                                                  "sessions", "session_evictions", "mean_batch", "prefix_hits")},
            "failures": t.failures,
        }


def run(args: argparse.Namespace) -> int:
    server = None
    key = args.api_key
    if args.base_url is None:
        key = key or secrets.token_hex(8)
        extra = ["--max-batch", str(args.max_batch), "--max-sessions", str(max(args.calls * 2, 8))]
        if args.threads:
            extra += ["--threads", str(args.threads)]
        server = SpawnedServer(args.model, extra, key, args.server_log).__enter__()
        base_url = server.base_url
    else:
        base_url = args.base_url.rstrip("/").removesuffix("/v1")
    try:
        report = asyncio.run(Soak(base_url, key, args).run())
    finally:
        if server is not None:
            server.stop()
    print(f"soak: {report['requests']} requests in {report['elapsed_s']} s against {base_url}")
    print(f"  sent {report['sent']}  ok {report['ok']}  HTTP statuses {report['statuses']}")
    r = report["rss_mb"]
    print(f"  server RSS MB: first {r['first']}, after warm-up {r['after_warmup']}, final {r['final']}, "
          f"max {r['max']} ({r['samples']} samples)")
    print("  RSS by requests done: " + " ".join(f"{n}:{mb:.0f}" for n, mb in r["series"]))
    print(f"  server: {report['server']}")
    for name, ok in report["checks"].items():
        print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    for f in report["failures"]:
        print(f"  failure: {f}")
    print(f"soak {'PASSED' if report['passed'] else 'FAILED'}")
    if args.json:
        print(json.dumps(report))
    return 0 if report["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    from engine.serve.tool_args import soak_arguments

    parser = argparse.ArgumentParser(prog="python -m engine.tools.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    soak_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    from engine.errors import run_tool

    raise SystemExit(run_tool(main, "python -m engine.tools.soak"))
