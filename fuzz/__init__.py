"""Fuzz targets (atheris/libFuzzer), one module per surface that takes bytes from outside.

Each target module has a ``test_one_input(data)`` that feeds *data* to one surface and
checks its invariants: bad input gets the surface's one declared error (or its documented
reply), anything else (another exception, a traceback logged, a broken invariant) is a
finding. ``python -m fuzz.run`` runs them under atheris (``make fuzz`` for longer); the
seed inputs are in ``fuzz/corpus/<target>/``; the unit tests replay the seeds and run
each target briefly (``tests/unit/test_fuzz.py``).
"""
