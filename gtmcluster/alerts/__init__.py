"""Alerts for sites without Prometheus: webhooks told of what the node notices (a server,
pool, data center or link down or back, a peer lost or back, a config run or refused, a
certificate about to expire), signed, retried with back-off, and sent by one member of the
group for each event (docs/operations.md, "Webhooks").
"""
