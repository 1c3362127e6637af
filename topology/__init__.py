"""gantry's network topology model: switch trees, blocks, parsers, writers and placement."""
