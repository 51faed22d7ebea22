"""engram-top, the product: one package per job, layered as pyproject.toml's contracts say."""
