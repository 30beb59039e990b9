"""Backends run a resolved run: ``sim`` (the Rust simulator); ``kernel`` and ``uring`` later."""
