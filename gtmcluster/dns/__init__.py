"""Authoritative DNS: wire format, the responder and the Twisted transports (the zones
they answer from are values in `dnsdata`)."""
