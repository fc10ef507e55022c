"""Health: anti-flap verdicts, aggregation over observers, links, dependencies, operators'
admin states applied (their records' values: `state.admin`), manual resume and slow start;
the availability the load balancer reads."""
