"""Tools for the repository (not the product): the docs written from the code, their checks."""
