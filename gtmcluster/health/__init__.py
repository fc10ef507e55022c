"""Health: anti-flap verdicts, aggregation over observers, links, dependencies, admin
states, manual resume and slow start; the availability the load balancer reads."""
