"""The chaos run (``bench/chaos.py``): three GTM sites on the emulated WAN, a nemesis that cuts,
drops, kills and skews, a load generator and a state observer, and the invariants checked
from the recorded history.

- `schedule`: the nemesis's seeded plan (pure);
- `invariants`: the checks and figures over a history (pure);
- `world`: the namespaces, configs and processes of the three sites and the client;
- `loadgen`: the DNS load generator, a process of its own in the client's namespace;
- `run`: one run: the world, the observer, the admin writer and the nemesis, recorded.
"""
