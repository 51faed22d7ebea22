"""SGLang's own readers: its HTTP pages and metrics, its start-up log."""
