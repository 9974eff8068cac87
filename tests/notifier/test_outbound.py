"""Every outbound URL is on the allow-list: a Slack ``base_url`` or webhook URL and a PagerDuty ``url``
pointed elsewhere would hand out the bot token or the routing key. Checked when the receiver is built
(a ConfigError naming the receiver and the host) and again on every request, redirects included."""

from __future__ import annotations

import pytest
from aiohttp import web

from tailhound.errors import ConfigError, DeliveryError
from tailhound.notifier.config import parse_config
from tailhound.notifier.receiver_set import build_receivers
from tailhound.notifier.receivers.outbound import DEFAULT_HOSTS, url_problem
from tailhound.notifier.receivers.pagerduty import PagerDutyConfig, PagerDutyReceiver
from tailhound.notifier.receivers.registry import build_receiver
from tailhound.notifier.receivers.slack import SlackConfig, SlackReceiver
from tailhound.settings import Settings

from .factories import notification
from .pagerduty_server import serve_pagerduty
from .slack_server import TOKEN, serve_slack

PD_KEY = "R0UT1NGK3Y0123456789abcdefSECRET"
HOOK_PATH = "/services/T0000/B0000/webhooksecretXYZ"
ENV = {"SLACK_TOKEN": TOKEN, "SLACK_HOOK": f"https://evil.example.org{HOOK_PATH}", "PD_KEY": PD_KEY}


def slack_bot(base_url: str | None) -> SlackConfig:
    return SlackConfig(
        type="slack",
        name="slack-oncall",
        token={"env": "SLACK_TOKEN"},
        channel="#alerts",
        base_url=base_url,
        min_interval_s=0,
        timeout_s=2,
    )


def pagerduty(url: str) -> PagerDutyConfig:
    return PagerDutyConfig(type="pagerduty", name="pd-oncall", routing_key={"env": "PD_KEY"}, url=url, timeout_s=2)


def test_slack_base_url_elsewhere_is_refused_naming_receiver_and_host():
    with pytest.raises(
        ConfigError,
        match=r"slack receiver 'slack-oncall': host 'evil\.example\.org' is not in "
        r"notifier\.webhook_allowed_hosts",
    ):
        SlackReceiver(slack_bot("https://evil.example.org/api/"), environ=ENV)


def test_slack_webhook_url_elsewhere_is_refused_without_showing_the_url():
    cfg = SlackConfig(type="slack", name="slack-hook", webhook_url={"env": "SLACK_HOOK"})
    with pytest.raises(ConfigError, match=r"'slack-hook': host 'evil\.example\.org'") as err:
        SlackReceiver(cfg, environ=ENV)
    assert HOOK_PATH not in str(err.value) and "webhooksecret" not in str(err.value)


def test_pagerduty_url_elsewhere_is_refused_naming_receiver_and_host():
    with pytest.raises(ConfigError, match=r"pagerduty receiver 'pd-oncall': host 'evil\.example\.org'"):
        PagerDutyReceiver(pagerduty("https://evil.example.org/v2/enqueue"), environ=ENV)


async def test_service_hosts_are_allowed_by_default_over_https_only():
    for r in (
        SlackReceiver(slack_bot(None), environ=ENV),
        SlackReceiver(slack_bot("https://slack.com/api/"), environ=ENV),
        SlackReceiver(
            SlackConfig(type="slack", name="h", webhook_url={"env": "H"}),
            environ={"H": f"https://hooks.slack.com{HOOK_PATH}"},
        ),
        PagerDutyReceiver(pagerduty("https://events.pagerduty.com/v2/enqueue"), environ=ENV),
        PagerDutyReceiver(pagerduty("https://events.eu.pagerduty.com/v2/enqueue"), environ=ENV),
    ):
        await r.close()
    with pytest.raises(ConfigError, match="over https only"):
        SlackReceiver(slack_bot("http://slack.com/api/"), environ=ENV)
    with pytest.raises(ConfigError, match="over https only"):
        PagerDutyReceiver(pagerduty("http://events.pagerduty.com/v2/enqueue"), environ=ENV)
    # one kind's hosts are not another's
    assert url_problem("pagerduty", "https://slack.com/api/", [])[1] is not None
    assert url_problem("webhook", "https://events.pagerduty.com/x", [])[1] is not None
    assert DEFAULT_HOSTS["webhook"] == ()


def test_loopback_only_when_listed():
    with pytest.raises(ConfigError, match="host '127.0.0.1'"):
        PagerDutyReceiver(pagerduty("http://127.0.0.1:9/v2/enqueue"), environ=ENV)
    with pytest.raises(ConfigError, match="host 'localhost'"):
        SlackReceiver(slack_bot("http://localhost:9/api/"), environ=ENV, allowed_hosts=["127.0.0.1"])
    for bad in ("https://user:pw@slack.com/api/", "https://slack.com\\@evil.example.org/api/", "ftp://slack.com/"):
        with pytest.raises(ConfigError, match="'slack-oncall'"):
            SlackReceiver(slack_bot(bad), environ=ENV)


async def test_the_settings_allow_list_is_used_for_every_receiver_kind():
    cfg = parse_config(
        "route: {receiver: s}\nreceivers:\n"
        "  - {type: slack, name: s, token: {env: SLACK_TOKEN}, channel: '#a', base_url: 'http://127.0.0.1:9/api/'}\n"
        "  - {type: pagerduty, name: p, routing_key: {env: PD_KEY}, url: 'http://127.0.0.1:9/v2/enqueue'}\n"
    )
    with pytest.raises(ConfigError, match="receiver 's'.*'127.0.0.1'"):
        build_receiver(cfg.receivers[0], allowed_hosts=[], environ=ENV)
    with pytest.raises(ConfigError, match="receiver 'p'.*'127.0.0.1'"):
        build_receiver(cfg.receivers[1], allowed_hosts=[], environ=ENV)
    settings = Settings(notifier={"webhook_allowed_hosts": ["127.0.0.1"]})
    with pytest.MonkeyPatch.context() as mp:
        for k, v in ENV.items():
            mp.setenv(k, v)
        receivers = build_receivers(settings, cfg)
        for r in receivers.values():
            await r.close()
        with pytest.raises(ConfigError, match="not in notifier.webhook_allowed_hosts"):
            build_receivers(Settings(), cfg)


async def test_checked_again_at_send_time_nothing_leaves():
    """A receiver whose URL changed after it was built (or a bug that swaps it) sends nothing."""
    async with serve_pagerduty() as allowed, serve_pagerduty() as other:
        r = PagerDutyReceiver(pagerduty(allowed.url), environ=ENV, allowed_hosts=["127.0.0.1"])
        try:
            await r.send(notification(receiver="pd-oncall"))
            r.config = r.config.model_copy(update={"url": other.url.replace("127.0.0.1", "localhost")})
            with pytest.raises(DeliveryError, match="refused to send: host 'localhost'") as err:
                await r.send(notification(receiver="pd-oncall"))
            assert not err.value.retryable  # straight to the dead letters, not retried
        finally:
            await r.close()
        assert len(allowed.accepted) == 1 and other.requests == []


async def test_a_redirect_off_the_list_is_not_followed():
    """Slack's client (aiohttp) follows redirects; the guard checks where one leads before it is followed."""
    async with serve_slack() as elsewhere:

        async def redirect(request: web.Request) -> web.Response:
            target = elsewhere.base_url.replace("127.0.0.1", "localhost") + request.match_info["method"]
            raise web.HTTPTemporaryRedirect(target)

        app = web.Application()
        app.router.add_post("/api/{method}", redirect)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        r = SlackReceiver(slack_bot(f"http://127.0.0.1:{port}/api/"), environ=ENV, allowed_hosts=["127.0.0.1"])
        try:
            with pytest.raises(DeliveryError, match="refused to send: host 'localhost'"):
                await r.send(notification(receiver="slack-oncall"), None)
        finally:
            await r.close()
            await runner.cleanup()
        assert elsewhere.requests == []
