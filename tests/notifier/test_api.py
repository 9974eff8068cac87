"""The notifier's HTTP API without a broker: access (bearer token for writes, reads open on loopback),
bounds on what a client can make it hold (count, sizes, duration, body, JSON), and its listener (port
0, IPv6, a second instance on the same host)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from pydantic import SecretStr

from tailhound.errors import ConfigError
from tailhound.notifier import pipeline
from tailhound.notifier.api import ApiAccess, serve
from tailhound.notifier.config import parse_config
from tailhound.notifier.pipeline import Notifier
from tailhound.notifier.state import Silence
from tailhound.settings import NotifierSettings, Settings, load_settings

TOKEN = "tok-0123456789abcdef-not-a-real-one"
SILENCE = {"matchers": ['node="gpu-node-8"'], "author": "ana", "comment": "CHG-1", "duration": "1h"}


class FakeService:
    """What the API needs of the notifier service; silences are kept in memory instead of the topic."""

    def __init__(self) -> None:
        self.notifier = Notifier(parse_config("route: {receiver: c}\nreceivers: [{type: console, name: c}]\n"))
        self.active = True
        self.ingested = 0
        self.api_port: int | None = None
        self.clock = time.time
        self.written: list[Silence] = []

    async def write_silence(self, silence: Silence) -> None:
        self.written.append(silence)
        self.notifier.silences[silence.id] = silence


@asynccontextmanager
async def api(access: ApiAccess | None = None, listen: str = "127.0.0.1:0") -> AsyncIterator[tuple[FakeService, str]]:
    service = FakeService()
    runner = await serve(service, listen, access)
    host = listen.rpartition(":")[0] or "127.0.0.1"
    try:
        yield service, f"http://{host}:{service.api_port}"
    finally:
        await runner.cleanup()


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def post(
    base: str, body: Any = None, *, headers: dict[str, str] | None = None, data: bytes | None = None
) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http:
        kw: dict[str, Any] = (
            {"data": data, "headers": {"Content-Type": "application/json", **(headers or {})}}
            if data is not None
            else {"json": body, "headers": headers or {}}
        )
        async with http.post(f"{base}/api/v1/silences", **kw) as r:
            text = await r.text()
            try:
                return r.status, await r.json(content_type=None)
            except ValueError:
                return r.status, text


async def get(base: str, path: str, headers: dict[str, str] | None = None) -> int:
    async with aiohttp.ClientSession() as http, http.get(f"{base}{path}", headers=headers or {}) as r:
        return r.status


# --- access ----------------------------------------------------------------------------------------------------
async def test_writes_without_a_configured_token_are_refused_by_default():
    async with api() as (service, base):
        status, body = await post(base, SILENCE)
        assert status == 403 and "TAILHOUND_NOTIFIER__API_TOKEN" in body["error"]
        async with aiohttp.ClientSession() as http, http.delete(f"{base}/api/v1/silences/sil-x") as r:
            assert r.status == 403
        assert service.written == []
        assert await get(base, "/api/v1/silences") == 200  # reads stay open on loopback
        assert await get(base, "/-/healthy") == 200


async def test_writes_need_the_bearer_token():
    async with api(ApiAccess(token=TOKEN.encode())) as (service, base):
        assert (await post(base, SILENCE))[0] == 401
        assert (await post(base, SILENCE, headers=bearer("wrong")))[0] == 401
        assert (await post(base, SILENCE, headers=bearer(TOKEN + "x")))[0] == 401
        assert (await post(base, SILENCE, headers={"Authorization": TOKEN}))[0] == 401  # no scheme
        status, created = await post(base, SILENCE, headers=bearer())
        assert status == 201 and [s.id for s in service.written] == [created["id"]]
        async with aiohttp.ClientSession() as http:
            async with http.delete(f"{base}/api/v1/silences/{created['id']}") as r:
                assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
            async with http.delete(f"{base}/api/v1/silences/{created['id']}", headers=bearer()) as r:
                assert r.status == 200 and (await r.json())["expired_at"]


async def test_unauthenticated_writes_only_when_allowed_explicitly_and_only_on_loopback():
    async with api(ApiAccess(allow_unauthenticated_writes=True)) as (_, base):
        assert (await post(base, SILENCE))[0] == 201
    access = ApiAccess(allow_unauthenticated_writes=True)
    async with api(access) as (_, base):
        access.loopback = False  # as if it listened on 0.0.0.0: the switch no longer counts
        status, body = await post(base, SILENCE)
        assert status == 403 and "only while the API listens on loopback" in body["error"]
        assert await get(base, "/api/v1/groups") == 403  # reads off loopback need a token too
        assert await get(base, "/-/ready") == 200  # probes send none
    access = ApiAccess(token=TOKEN.encode())
    async with api(access) as (_, base):
        access.loopback = False
        assert await get(base, "/api/v1/silences") == 401
        assert await get(base, "/api/v1/silences", bearer()) == 200


def test_loopback_is_what_the_socket_is_bound_to():
    async def bound(listen: str) -> bool:
        access = ApiAccess()
        async with api(access, listen):
            return access.loopback

    assert asyncio.run(bound("127.0.0.1:0")) is True
    assert asyncio.run(bound("0.0.0.0:0")) is False


async def test_token_from_env_or_file_never_from_a_settings_file_and_never_shown(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("TAILHOUND_NOTIFIER__API_TOKEN", raising=False)
    token_file = tmp_path / "api-token"
    token_file.write_text(TOKEN + "\n")
    access = ApiAccess.from_settings(NotifierSettings(api_token_file=token_file))
    assert access.token == TOKEN.encode() and TOKEN not in repr(access)

    monkeypatch.setenv("TAILHOUND_NOTIFIER__API_TOKEN", TOKEN)
    settings = load_settings()
    assert ApiAccess.from_settings(settings.notifier).token == TOKEN.encode()
    assert TOKEN not in repr(settings) and TOKEN not in settings.model_dump_json()
    assert "api_token" not in settings.notifier.model_dump()  # not passed on to child processes as '****'

    yaml_file = tmp_path / "settings.yaml"
    yaml_file.write_text(f"notifier:\n  api_token: {TOKEN}\n")
    with pytest.raises(ConfigError, match="never read from a settings file") as err:
        load_settings(yaml_file)
    assert TOKEN not in str(err.value)

    missing = ApiAccess.from_settings(NotifierSettings(api_token_file=tmp_path / "nope"))
    assert missing.token is None and "cannot read it" in (missing.problem or "")
    with caplog.at_level(logging.DEBUG):
        async with api(missing) as (_, base):
            status, body = await post(base, SILENCE, headers=bearer())
    assert status == 403 and "not usable" in body["error"]
    async with api(ApiAccess(token=TOKEN.encode())) as (_, base):
        with caplog.at_level(logging.DEBUG):
            await post(base, SILENCE, headers=bearer("wrong-" + TOKEN))
            await post(base, SILENCE, headers=bearer())
    assert TOKEN not in caplog.text


# --- bounds ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({**SILENCE, "duration": None, "ends_at": float("nan")}, 400, "not a number JSON allows"),
        ({**SILENCE, "duration": None, "ends_at": float("inf")}, 400, "not a number JSON allows"),
        ({**SILENCE, "starts_at": float("-inf")}, 400, "not a number JSON allows"),
        ({**SILENCE, "comment": "x" * 100_000}, 413, ""),
        ({**SILENCE, "comment": "x" * 1025}, 400, "comment has 1025 bytes"),
        ({**SILENCE, "author": "x" * 2000}, 400, "author has 2000 bytes"),
        ({**SILENCE, "matchers": ['node="a"'] * 17}, 400, "matchers: List should have at most 16 items"),
        ({**SILENCE, "duration": "31d"}, 400, "at most 30 days"),
        (
            {**SILENCE, "matchers": ['node=~"(a)\\\\1"']},
            400,
            'matchers.0: Value error, invalid regular expression in matcher node=~"(a)\\\\1"',
        ),
        ({**SILENCE, "matchers": [{"name": "node", "op": "=~", "value": "x(?=y)"}]}, 400, "invalid perl operator"),
        ([SILENCE], 400, "valid dictionary"),
    ],
)
async def test_bad_silences_are_refused(body, status, says):
    async with api(ApiAccess(token=TOKEN.encode())) as (service, base):
        import json

        data = json.dumps(body, allow_nan=True).encode()
        got, answer = await post(base, headers=bearer(), data=data)
        assert got == status, answer
        assert says in (answer["error"] if isinstance(answer, dict) else answer)
        assert service.written == []


async def test_big_numbers_and_deep_json_are_400_not_500():
    async with api(ApiAccess(token=TOKEN.encode())) as (service, base):
        status, answer = await post(
            base, headers=bearer(), data=b'{"matchers":["a=\\"b\\""],"author":"a","comment":"c","ends_at":1e999}'
        )
        assert status == 400, answer
        status, answer = await post(base, headers=bearer(), data=b"[" * 30_000 + b"]" * 30_000)
        assert status == 400 and "nested too deeply" in answer["error"]
        status, answer = await post(base, headers=bearer(), data=b'{"matchers": [')
        assert status == 400 and "invalid JSON" in answer["error"]
        assert service.written == []


async def test_active_and_pending_silences_are_capped(monkeypatch):
    monkeypatch.setattr(pipeline, "MAX_SILENCES", 5)
    async with api(ApiAccess(token=TOKEN.encode())) as (service, base):
        for _ in range(5):
            assert (await post(base, SILENCE, headers=bearer()))[0] == 201
        status, body = await post(base, SILENCE, headers=bearer())
        assert status == 409 and "active or pending silences" in body["error"]
        url = f"{base}/api/v1/silences/{service.written[0].id}"  # expiring one makes room
        async with aiohttp.ClientSession() as http, http.delete(url, headers=bearer()) as r:
            assert r.status == 200
        assert (await post(base, SILENCE, headers=bearer()))[0] == 201


# --- the listener ------------------------------------------------------------------------------------------------
async def test_port_zero_and_two_instances_on_one_host():
    async with api() as (one, base1), api() as (two, base2):
        assert one.api_port and two.api_port and one.api_port != two.api_port
        assert await get(base1, "/-/healthy") == 200 and await get(base2, "/-/healthy") == 200
        with pytest.raises(OSError):  # a fixed port that is taken is an error the service logs and survives
            await serve(FakeService(), f"127.0.0.1:{one.api_port}")


async def test_ipv6_loopback():
    try:
        async with api(listen="[::1]:0") as (service, base):
            assert await get(base, "/-/healthy") == 200
    except OSError:
        pytest.skip("no IPv6 loopback here")


def test_listen_setting():
    assert Settings(notifier={"api_listen": "[::1]:0"}).notifier.api_listen == "[::1]:0"
    assert Settings(notifier={"api_listen": "127.0.0.1:0"}).notifier.api_listen == "127.0.0.1:0"
    for bad in ("127.0.0.1:70000", "::1:9095", "127.0.0.1"):
        with pytest.raises(ValueError):
            Settings(notifier={"api_listen": bad})
    assert NotifierSettings(api_token=SecretStr("x")).api_token is not None


# --- probes and metrics, as every tailhound process answers them ----------------------------------------------
async def test_probe_bodies_and_process_metrics():
    from prometheus_client import CollectorRegistry

    async with api() as (service, base), aiohttp.ClientSession() as http:
        service.registry = CollectorRegistry()
        async with http.get(f"{base}/-/healthy") as r:
            assert (r.status, await r.text()) == (200, "tailhound notifier is Healthy.\n")
        async with http.get(f"{base}/-/ready") as r:
            assert (r.status, await r.text()) == (200, "tailhound notifier is Ready.\n")
        service.active = False
        async with http.get(f"{base}/-/ready") as r:
            assert r.status == 503 and (await r.text()).startswith("tailhound notifier is not ready: standing by")
        for _ in range(2):  # registered once, however often scraped
            async with http.get(f"{base}/metrics") as r:
                text = await r.text()
    assert text.count("# TYPE process_resident_memory_bytes gauge") == 1 and "python_info{" in text
