"""The simulated node: SGLang's and vLLM's dialects over one scheduler model."""
