"""Reference implementations the native trainer is checked against (PyTorch, optional)."""
