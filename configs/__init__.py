"""ml_collections config files; each file's docstring says what it trains."""
