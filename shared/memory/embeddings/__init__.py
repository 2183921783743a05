"""Embedders (OpenAI, Bedrock Titan, local MiniLM), the embedding cache and the chunker."""
