"""Training data: llm.c-layout token shards and the byte-level tokenizer."""
