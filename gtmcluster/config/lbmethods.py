"""The names of the load-balancing methods, for config validation and for `lb`'s dispatch.

Kept apart from the implementations so the config loader can check names without importing
the engine.
"""

#: choose among members on their own (static: no measurements needed)
STATIC = ("round_robin", "ratio", "global_availability", "topology", "static_persist", "random")
#: need measurements (paths, load) that arrive with later components; until then they yield
#: nothing and the chain moves on
DYNAMIC = (
    "rtt",
    "completion_rate",
    "hops",
    "qos",
    "least_connections",
    "packet_rate",
    "kbps",
    "vs_capacity",
    "weighted_least_connections",
    "dynamic_ratio",
)
#: choose by the members' links (`lb.links`): their configured bandwidth or cost, or their
#: free bandwidth as measured (link_capacity yields nothing until it is)
LINK = ("bandwidth_ratio", "lowest_cost", "link_capacity")
#: end the search with a fixed outcome, or skip
SPECIAL = ("fallback_ip", "return_to_dns", "drop_packet", "none")

MEMBER_METHODS = STATIC + DYNAMIC + LINK + SPECIAL
POOL_METHODS = ("round_robin", "ratio", "global_availability", "topology", "random", "static_persist", *DYNAMIC, *LINK)
