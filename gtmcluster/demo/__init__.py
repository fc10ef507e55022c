"""The local demo: a three-node sync group on loopback, with stand-ins for the world."""
