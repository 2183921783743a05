"""The webhook function: API Gateway HTTP API in, signed messages onto their session lanes."""
