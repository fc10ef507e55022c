"""Authoritative DNS: wire format, zones, the responder and the Twisted transports."""
