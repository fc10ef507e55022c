"""The public RUM listener (issue 36): browsers' beacons of their round-trip times to each
data center, the snippet that measures them, and the object a node serves as a target."""
