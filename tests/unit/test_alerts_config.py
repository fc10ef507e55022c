"""The ``alerts`` section: webhooks (URL, secret file, event kinds), the networks they may
reach (``alerts.allow``, the prober's rules), and the delivery caps; each mistake is one
problem naming the file, the key path and what is wrong."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from gtmcluster.config import alerts
from gtmcluster.config.load import load
from tests.support import configs
from tests.unit.test_config_errors import assert_form, find, problems_of

SECRET = "s3cret-for-the-receiver-0123456789"


def _hooks(*hooks: dict[str, Any], **settings: Any) -> Any:
    def apply(config: dict[str, Any]) -> None:
        config["alerts"] = {"webhooks": list(hooks), **settings}

    return apply


def test_webhooks_are_read_with_their_secret_and_kinds(tmp_path: Path) -> None:
    configs.write_secret(tmp_path / "hook.key", SECRET + "\n")
    config = configs.base()
    config["alerts"] = {
        "allow": ["127.0.0.0/8"],
        "webhooks": [
            {"url": "http://127.0.0.1:9000/gtm?token=x", "secret_file": "hook.key", "events": ["vs_down", "pool_down"]},
            {"url": "https://hooks.example.com/gtm", "secret_file": "hook.key"},
        ],
        "max_attempts": 3,
        "backoff": 1,
    }
    settings = load(configs.write(tmp_path, config)).alerts
    first, second = settings.webhooks
    assert first.secret == SECRET.encode() and first.events == ("vs_down", "pool_down")
    assert first.label == "http://127.0.0.1:9000/gtm"  # the query (a receiver's token) left out
    assert second.events == alerts.EVENTS
    assert settings.allow == (ipaddress.ip_network("127.0.0.0/8"),)
    assert (settings.max_attempts, settings.backoff, settings.max_queue) == (3, 1.0, 1000)
    assert "s3cret" not in repr(settings)


def test_no_alerts_section_sends_nothing(tmp_path: Path) -> None:
    assert load(configs.write(tmp_path, configs.base())).alerts == alerts.Alerts()


HOOK = {"url": "https://hooks.example.com/gtm", "secret_file": "hook.key"}


@pytest.mark.parametrize(
    ("mutation", "path", "fragment"),
    [
        (_hooks({**HOOK, "url": "ftp://hooks.example.com/"}), "alerts.webhooks[0].url", "scheme must be http or https"),
        (_hooks({**HOOK, "url": "https:///gtm"}), "alerts.webhooks[0].url", "names no host"),
        (_hooks({**HOOK, "url": "https://a:b@hooks.example.com/"}), "alerts.webhooks[0].url", "user name or password"),
        (_hooks({**HOOK, "url": "https://hooks.example.com:99999/"}), "alerts.webhooks[0].url", "is not a URL"),
        (_hooks({**HOOK, "url": "https://hooks example.com/"}), "alerts.webhooks[0].url", "white space"),
        # inside refused ranges: loopback, a cloud's metadata service, private use, multicast
        (_hooks({**HOOK, "url": "http://127.0.0.1:9000/"}), "alerts.webhooks[0].url", "alerts.allow does not open"),
        (_hooks({**HOOK, "url": "http://localhost/"}), "alerts.webhooks[0].url", "127.0.0.1 is a special-purpose"),
        (
            _hooks({**HOOK, "url": "http://169.254.169.254/latest/meta-data/"}),
            "alerts.webhooks[0].url",
            "169.254.169.254 is a special-purpose address",
        ),
        (_hooks({**HOOK, "url": "http://[::ffff:10.1.2.3]/"}), "alerts.webhooks[0].url", "10.1.2.3 is a special"),
        (
            _hooks({**HOOK, "url": "http://224.0.0.1/"}, allow=["127.0.0.0/8"]),
            "alerts.webhooks[0].url",
            "never reached",
        ),
        (_hooks({**HOOK, "secret_file": "missing.key"}), "alerts.webhooks[0].secret_file", "cannot read"),
        (_hooks({"url": HOOK["url"]}), "alerts.webhooks[0]", "missing key 'secret_file'"),
        (_hooks({**HOOK, "events": ["vs_down", "vs_sideways"]}), "alerts.webhooks[0].events[1]", "'vs_sideways'"),
        (_hooks({**HOOK, "events": []}), "alerts.webhooks[0].events", "names no event"),
        (_hooks({**HOOK, "secret": "x"}), "alerts.webhooks[0].secret", "unknown key"),
        (_hooks(HOOK, allow=["8.8.8.0/24"]), "alerts.allow[0]", "holds no special-purpose address"),
        (_hooks(HOOK, max_attempts=0), "alerts.max_attempts", "out of range"),
        (_hooks(HOOK, backoff=10, backoff_max=5), "alerts.backoff_max", "less than backoff"),
        (_hooks(*[HOOK] * 17), "alerts.webhooks", "at most 16"),
    ],
)
def test_a_bad_webhook_is_one_clear_problem(tmp_path: Path, mutation: Any, path: str, fragment: str) -> None:
    configs.write_secret(tmp_path / "hook.key", SECRET)
    file, problems = problems_of(tmp_path, mutation)
    assert_form(find(problems, path, fragment), file, path)


def test_a_secret_others_may_read_is_refused(tmp_path: Path) -> None:
    (tmp_path / "hook.key").write_text(SECRET)
    (tmp_path / "hook.key").chmod(0o644)
    file, problems = problems_of(tmp_path, _hooks(HOOK))
    at = "alerts.webhooks[0].secret_file"
    message = assert_form(find(problems, at, "cannot read"), file, at)
    assert "others" in message


def test_a_short_secret_is_refused(tmp_path: Path) -> None:
    configs.write_secret(tmp_path / "hook.key", "short")
    file, problems = problems_of(tmp_path, _hooks(HOOK))
    assert_form(find(problems, "alerts.webhooks[0].secret_file", "at least 16"), file, "alerts.webhooks[0].secret_file")


def test_refusal_follows_the_probers_ranges() -> None:
    allow = (ipaddress.ip_network("10.20.0.0/16"),)
    assert alerts.refusal(ipaddress.ip_address("10.20.1.2"), allow) is None
    assert alerts.refusal(ipaddress.ip_address("93.184.216.34"), ()) is None
    assert "special-purpose" in (alerts.refusal(ipaddress.ip_address("10.21.0.1"), allow) or "")
    assert "special-purpose" in (alerts.refusal(ipaddress.ip_address("fe80::1"), allow) or "")
    assert "never" in (alerts.refusal(ipaddress.ip_address("0.0.0.0"), allow) or "")
