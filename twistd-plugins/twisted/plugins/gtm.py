"""The twistd plugin `gtm`: wiring only (see gtmcluster.tap)."""

from twisted.application.service import ServiceMaker

gtm = ServiceMaker(
    "gtmcluster node",
    "gtmcluster.tap",
    "A gtmcluster node: authoritative DNS with wide IPs, probes and a sync group member.",
    "gtm",
)
