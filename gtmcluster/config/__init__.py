"""Configuration: YAML loading, strict validation, and the frozen model (see `load`, `model`)."""
