"""The process's runtime, below everything else: reading files the config names safely
(`files`), writing owner-only files (`private`), and what a process needs whatever it
serves (time slices, the GIL and the garbage collector, heap figures, reactor lag,
counters, token buckets, connection slots and sources, sockets). Imports nothing of
gtmcluster above it."""
