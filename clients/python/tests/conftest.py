"""A real Herald for the tests: `herald serve` on a free port with a temporary
SQLite database, a fake SMS provider, two API tokens and signed receipts; and
the client under test in both flavours, each test running once with `Herald`
and once with `AsyncHerald`."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import secrets
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import anyio
import anyio.to_thread
import httpx
import pytest
from fakes import FakeSms, FlakyProxy

from herald_client import AsyncHerald, Herald, RetryPolicy

REPO = Path(__file__).resolve().parents[3]
OPS_TOKEN = "ops-" + secrets.token_hex(16)
READ_TOKEN = "read-" + secrets.token_hex(16)
TENANT = "acme"
# A tenant only the shadow report's test posts to, so its counts are its own.
LOOKOUT_TOKEN = "lookout-" + secrets.token_hex(16)
# Quick retries for the tests; a Retry-After still sets the floor.
QUICK = RetryPolicy(attempts=3, base=0.05, max=0.2)


def herald_bin() -> Path:
    """$HERALD_BIN, else this checkout's release build, else its debug build."""
    if "HERALD_BIN" in os.environ:
        given = Path(os.environ["HERALD_BIN"])
        if not given.is_file():
            pytest.fail(f"HERALD_BIN={given}: no such file")
        return given
    for profile in ("release", "debug"):
        candidate = REPO / "target" / profile / "herald"
        if candidate.exists():
            return candidate
    pytest.fail("no Herald binary: set HERALD_BIN, or build one (cargo build) in " + str(REPO))


@dataclass
class RunningHerald:
    base_url: str
    port: int
    receipt_secret: str
    log: Path

    def sign_receipt(self, receipt: dict[str, Any]) -> httpx.Response:
        """A generic delivery receipt, signed as Standard Webhooks has it, posted to Herald."""
        body = json.dumps(receipt)
        message_id = "msg_" + secrets.token_hex(8)
        timestamp = str(int(time.time()))
        key = base64.b64decode(self.receipt_secret.removeprefix("whsec_"))
        signed = f"{message_id}.{timestamp}.{body}".encode()
        signature = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest())
        return httpx.post(
            f"{self.base_url}/v1/receipts/generic",
            content=body,
            headers={
                "content-type": "application/json",
                "webhook-id": message_id,
                "webhook-timestamp": timestamp,
                "webhook-signature": "v1," + signature.decode(),
            },
        )


def _config(workdir: Path, sms_url: str, receipt_secret: str) -> str:
    def token(name: str, value: str, scopes: list[str], tenant: str = TENANT) -> str:
        digest = hashlib.sha256(value.encode()).hexdigest()
        return (
            f'[[auth.tokens]]\nname = "{name}"\ntenant = "{tenant}"\n'
            f'token_sha256 = "{digest}"\nscopes = {json.dumps(scopes)}\n'
        )

    return (
        'listen = "127.0.0.1:0"\n'
        f'database_url = "sqlite://{workdir}/herald.db"\n'
        '[retry]\nattempts = 2\nbase = "1s"\nmax = "1s"\n'
        '[worker]\npoll_interval = "50ms"\n'
        '[[routes]]\nevent = "purchase_order.approved"\ntemplate = "po_approved"\nchannels = ["sms"]\n'
        f'[channels.sms]\nurl = "{sms_url}"\ntimeout = "5s"\n'
        f'[channels.email]\nsink = "{workdir}/outbox"\n'
        f'[receipts.generic]\nsecret = "{receipt_secret}"\n'
        '[log]\nformat = "json"\n'
        + token("ops", OPS_TOKEN, ["events:write", "intents:read", "recipients:write", "ops", "admin"])
        + token("reader", READ_TOKEN, ["intents:read"])
        + token("lookout", LOOKOUT_TOKEN, ["events:write", "ops"], tenant="lookout")
    )


def _wait_listening(process: subprocess.Popen[bytes], log: Path, deadline: float) -> int:
    """The port Herald bound, from its `herald is listening` log line."""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"herald serve exited with {process.returncode}:\n{log.read_text()}")
        for line in log.read_text().splitlines():
            if '"herald is listening"' in line:
                return int(json.loads(line)["fields"]["addr"].rsplit(":", 1)[1])
        time.sleep(0.05)
    pytest.fail(f"herald serve did not start listening in time:\n{log.read_text()}")


def _wait_ready(base_url: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base_url}/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    pytest.fail(f"{base_url}/readyz never answered 200")


@pytest.fixture(scope="session")
def fake_sms() -> Iterator[FakeSms]:
    fake = FakeSms()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def herald(fake_sms: FakeSms, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningHerald]:
    workdir = tmp_path_factory.mktemp("herald")
    receipt_secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    config = workdir / "herald.toml"
    config.write_text(_config(workdir, fake_sms.url, receipt_secret))
    log = workdir / "herald.log"
    # Herald refuses any HERALD_… variable it does not know, HERALD_BIN included.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(herald_bin()), "serve", "--config", str(config)], cwd=workdir, env=env, stdout=sink, stderr=sink
        )
    try:
        deadline = time.monotonic() + 30
        port = _wait_listening(process, log, deadline)
        base_url = f"http://127.0.0.1:{port}"
        _wait_ready(base_url, deadline)
        yield RunningHerald(base_url, port, receipt_secret, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def proxy(herald: RunningHerald) -> Iterator[FlakyProxy]:
    flaky = FlakyProxy(herald.port)
    yield flaky
    flaky.stop()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Blocking:
    """The sync client behind awaitable calls, each run in a worker thread, so
    one test body exercises `Herald` exactly as it exercises `AsyncHerald`."""

    def __init__(self, herald: Herald) -> None:
        self._herald = herald

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        call = getattr(self._herald, name)

        async def in_thread(*args: Any, **kwargs: Any) -> Any:
            return await anyio.to_thread.run_sync(functools.partial(call, *args, **kwargs))

        return in_thread


class Connect(Protocol):
    def __call__(
        self, *, base_url: str | None = ..., token: str | None = ..., retry: RetryPolicy | None = ...
    ) -> AsyncHerald: ...


@pytest.fixture(params=["sync", "async"])
async def connect(request: pytest.FixtureRequest, herald: RunningHerald) -> AsyncIterator[Connect]:
    """Makes clients of the flavour under test (typed as the async one)."""
    closers: list[Callable[[], Awaitable[None]]] = []

    def make(
        *, base_url: str | None = None, token: str | None = OPS_TOKEN, retry: RetryPolicy | None = QUICK
    ) -> AsyncHerald:
        url = base_url or herald.base_url
        if request.param == "async":
            client = AsyncHerald(url, token=token, retry=retry)
            closers.append(client.aclose)
            return client
        blocking = Herald(url, token=token, retry=retry)

        async def close() -> None:
            blocking.close()

        closers.append(close)
        return cast(AsyncHerald, Blocking(blocking))

    yield make
    for close in closers:
        await close()


@pytest.fixture
def client(connect: Connect) -> AsyncHerald:
    return connect()
