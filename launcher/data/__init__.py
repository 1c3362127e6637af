"""Training data: llm.c-layout token shards, the byte-level and the GPT-2 BPE tokenizers."""
