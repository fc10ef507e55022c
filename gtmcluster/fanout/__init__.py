"""Answering on several processes: the node and its UDP workers (dns_server.processes)."""
