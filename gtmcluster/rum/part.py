"""The RUM listener as a part of the node: its settings from the config (``rum:`` and the
member's ``rum`` address), its own certificate read with the caps of a config's files, and a
reload that retunes both (a new address, or HTTP to HTTPS, needs a restart:
`config.changes.restart_needed`)."""

from __future__ import annotations

from collections.abc import Callable

from gtmcluster.config.model import Config
from gtmcluster.config.rum import Rum, rum_zones
from gtmcluster.dnsdata import names
from gtmcluster.nodeparts import Commit, Reload
from gtmcluster.rum.limits import Rates
from gtmcluster.rum.listener import RumSite, Settings
from gtmcluster.rum.tls import RumTLS
from gtmcluster.runtime import files


def zones_of(config: Config) -> list[str]:
    """The zones of the one-use names as text (`config.rum.rum_zones`): the first is
    the snippet's, the others what ``?zone=`` may ask for."""
    return [
        names.to_text(origin).rstrip(".") for origin in rum_zones(config.rum, config.zones, config.wideips.values())
    ]


def settings_of(config: Config) -> Settings:
    """What the listener serves and takes under *config* (with ``rum`` off: no DC, so every
    beacon is refused as naming none)."""
    rum = config.rum or Rum({})
    zones = zones_of(config)
    return Settings(
        targets=dict(rum.targets),
        allow=rum.allow,
        rates=Rates(per_second=rum.beacons_per_second, burst=rum.burst),
        max_body=rum.max_body,
        zone=next(iter(zones), ""),
        zones=frozenset(zones),
        proxies=rum.trusted_proxies,
    )


def read_tls(rum: Rum | None) -> tuple[bytes, bytes] | None:
    """The listener's certificate and key (``rum.tls``), read as a config's PEM files (the
    key as a secret: its owner's alone). Raises OSError when one cannot be read, or when the
    two do not make a TLS identity."""
    if rum is None or rum.tls is None:
        return None
    pems = files.read_bytes(rum.tls.cert, files.PEM), files.read_bytes(rum.tls.key, files.SECRET)
    try:
        RumTLS(*pems)
    except Exception as e:  # (pyOpenSSL's and cryptography's errors: a bad PEM, a key not the certificate's)
        raise OSError(f"{rum.tls.cert} and {rum.tls.key} are not a certificate and its key: {e}") from None
    return pems


class RumPart:
    """The listener's settings and certificate, retuned by a reload."""

    label = "RUM listener"

    def __init__(self, site: RumSite, tls: RumTLS | None, read: Callable[[Rum | None], tuple[bytes, bytes] | None]):
        self.site = site
        self.tls = tls
        self.read = read

    def prepare(self, reload: Reload) -> Commit:
        settings = settings_of(reload.config)
        pems = self.read(reload.config.rum) if self.tls is not None else None  # (raises: the reload fails)
        tls = self.tls

        def commit() -> None:
            self.site.configure(settings)
            if tls is not None and pems is not None:
                tls.use(*pems)

        return commit
